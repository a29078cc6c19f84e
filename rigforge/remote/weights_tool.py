"""Model weights on the rig: verify, move into place and record them in a manifest; check disk space.

Usage (standard library only, except ``hf-download`` which runs in the venv holding huggingface_hub):
    python3 weights_tool.py check-space --path DIR --need BYTES [--expected BYTES --present BYTES]
    python3 weights_tool.py finish --dir DIR --name FILE --sha256 HEX --size BYTES --source local --origin TEXT
    python3 weights_tool.py adopt  --dir DIR --name FILE --sha256 HEX --size BYTES --source local --origin TEXT
    python3 weights_tool.py mirror --dir DIR --name FILE --sha256 HEX --size BYTES --url URL
    HF_PYTHON weights_tool.py hf-size --repo ID --revision REV [--allow PATTERN]... [--token-file F] [--endpoint URL]
    python3 weights_tool.py verify --dir DIR
    python3 weights_tool.py hf-download --dir DIR --repo ID --revision REV [--allow PATTERN ...] [--token-file F]
                                        [--endpoint URL]

Files arrive under a temporary name (``FILE.part``), are checked against their sha256, then renamed.
The manifest ``DIR/.rigforge-manifest.json`` records each file's size, mtime and sha256, computed once;
later runs compare sizes and mtimes only. ``verify`` re-hashes every recorded file and deletes (and
un-records) the ones that no longer match, so the next transfer fetches them again.

Exit codes: 0 done, 1 failed (the message says why), 2 bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

MANIFEST_NAME = ".rigforge-manifest.json"
PART_SUFFIX = ".part"
CHUNK = 1 << 20
GB = 1e9
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class WeightsError(Exception):
    """A step failed; the message is meant for the operator."""


def sha256_file(path: str) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def nearest_existing_dir(path: str) -> str:
    """``path`` or its closest existing parent (the folder may not exist before the first download)."""
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        current = os.path.dirname(current)
    return current


def free_bytes(path: str) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding ``path``."""
    stat = os.statvfs(nearest_existing_dir(path))
    return stat.f_bavail * stat.f_frsize


def space_problem(path: str, need: int, free: int, expected: int | None = None,
                  present: int | None = None, expected_from: str | None = None) -> str | None:
    """The message to fail with when ``need`` more bytes do not fit in ``free``; None when they fit."""
    if need <= free:
        return None
    said = f" by {expected_from}" if expected_from else ""
    detail = (f" ({expected / GB:.1f} GB expected{said}, {present / GB:.1f} GB already there)"
              if expected is not None else "")
    return (f"not enough disk space for the weights at {path}: need {need / GB:.1f} GB more{detail}, "
            f"only {free / GB:.1f} GB free on the filesystem of {nearest_existing_dir(path)}")


def read_manifest(directory: str) -> dict[str, Any]:
    """The manifest as a dict; a fresh empty one when absent or unreadable."""
    try:
        with open(os.path.join(directory, MANIFEST_NAME), encoding="utf-8") as handle:
            data = json.load(handle)
        if isinstance(data, dict) and isinstance(data.get("files"), list):
            return data
    except (OSError, ValueError):
        pass
    return {"format": 1, "source": "", "origin": "", "revision": None, "allow_patterns": [], "files": []}


def write_manifest(directory: str, manifest: dict[str, Any]) -> None:
    """Write the manifest atomically (temp file, fsync, rename, fsync of the folder)."""
    manifest["files"] = sorted(manifest["files"], key=lambda entry: entry["name"])
    manifest["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    target = os.path.join(directory, MANIFEST_NAME)
    temporary = target + ".tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, target)
    fsync_dir(directory)


def fsync_dir(directory: str) -> None:
    """Make a rename in ``directory`` survive a power loss."""
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def record_file(directory: str, name: str, sha256: str, source: str, origin: str,
                revision: str | None = None, allow_patterns: Sequence[str] = ()) -> dict[str, Any]:
    """Add (or replace) the manifest entry of ``name`` from its current stat and a sha256 already checked."""
    stat = os.stat(os.path.join(directory, name))
    manifest = read_manifest(directory)
    manifest.update(source=source, origin=origin, revision=revision, allow_patterns=list(allow_patterns))
    entry = {"name": name, "size": stat.st_size, "sha256": sha256, "mtime_ns": stat.st_mtime_ns}
    manifest["files"] = [e for e in manifest["files"] if e.get("name") != name] + [entry]
    write_manifest(directory, manifest)
    return entry


def forget_file(directory: str, name: str) -> None:
    """Delete ``name`` and drop its manifest entry, so the next transfer fetches it again."""
    manifest = read_manifest(directory)
    manifest["files"] = [e for e in manifest["files"] if e.get("name") != name]
    write_manifest(directory, manifest)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(directory, name))


def finish(directory: str, name: str, sha256: str, size: int, source: str, origin: str) -> str:
    """Check ``name.part`` (size, then sha256), rename it to ``name`` and record it; delete it when wrong."""
    final = os.path.join(directory, name)
    part = final + PART_SUFFIX
    actual_size = os.path.getsize(part)
    problem = None
    if actual_size != size:
        problem = f"size is {actual_size} bytes, expected {size}"
    else:
        digest = sha256_file(part)
        if digest != sha256:
            problem = f"sha256 is {digest}, expected {sha256}"
    if problem:
        os.unlink(part)
        raise WeightsError(f"{name}: {problem}; deleted the transfer, the next run starts it again")
    os.replace(part, final)
    fsync_dir(directory)
    record_file(directory, name, sha256, source, origin)
    return f"{name}: {size / 1e6:.1f} MB verified (sha256 ok) and in place"


def adopt(directory: str, name: str, sha256: str, size: int, source: str, origin: str) -> str:
    """Record a file already at its final name after hashing it once; delete it when it is wrong."""
    path = os.path.join(directory, name)
    if os.path.getsize(path) == size and sha256_file(path) == sha256:
        record_file(directory, name, sha256, source, origin)
        return f"{name}: already in place, sha256 ok; recorded in the manifest"
    forget_file(directory, name)
    return f"{name}: content does not match its sha256; deleted, it will be fetched again"


def mirror(directory: str, name: str, sha256: str, size: int, url: str) -> str:
    """Download ``url`` with fetch.py (resumable, verified while downloading), then record it."""
    import fetch  # shipped beside this tool (its folder is on sys.path when run as a script)

    try:
        result = fetch.fetch(url, os.path.join(directory, name), sha256=sha256, size=size)
    except (fetch.FetchError, fetch.InputError) as error:
        raise WeightsError(str(error)) from error
    record_file(directory, name, result.sha256 or sha256, "mirror", url)
    return f"{name}: {'downloaded' if result.downloaded else 'already present'} from the mirror, sha256 ok"


def verify(directory: str) -> str:
    """Re-hash every recorded file; delete and un-record the ones whose content changed."""
    manifest = read_manifest(directory)
    started, total, bad = time.monotonic(), 0, []
    for entry in list(manifest["files"]):
        path = os.path.join(directory, entry["name"])
        ok = os.path.isfile(path) and os.path.getsize(path) == entry["size"] and sha256_file(path) == entry["sha256"]
        total += entry["size"]
        if not ok:
            print(f"{entry['name']}: does not match its recorded sha256; deleting it to fetch it again",
                  file=sys.stderr)
            forget_file(directory, entry["name"])
            bad.append(entry["name"])
    seconds = time.monotonic() - started
    return (f"verified {len(manifest['files'])} file(s), {total / 1e6:.1f} MB in {seconds:.1f} s: "
            f"{len(bad)} corrupt{(' (' + ', '.join(bad) + ')') if bad else ''}")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit code documented in the module docstring."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        message = run(args)
    except WeightsError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED
    print(message)
    return EXIT_OK


def run(args: argparse.Namespace) -> str:
    """Dispatch one subcommand; returns its one-line summary."""
    if args.command == "check-space":
        problem = space_problem(args.path, args.need, free_bytes(args.path), args.expected, args.present,
                                args.expected_from)
        if problem:
            raise WeightsError(problem)
        return f"disk space ok: {args.need / GB:.1f} GB needed, {free_bytes(args.path) / GB:.1f} GB free"
    if args.command == "finish":
        return finish(args.dir, args.name, args.sha256, args.size, args.source, args.origin)
    if args.command == "adopt":
        return adopt(args.dir, args.name, args.sha256, args.size, args.source, args.origin)
    if args.command == "mirror":
        return mirror(args.dir, args.name, args.sha256, args.size, args.url)
    if args.command == "verify":
        return verify(args.dir)
    from hf_source import hf_download, hf_size  # shipped beside this tool; needs huggingface_hub

    if args.command == "hf-size":
        return hf_size(args.repo, args.revision, args.allow, args.token_file, args.endpoint)
    return hf_download(args.dir, args.repo, args.revision, args.allow, args.token_file, args.endpoint)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse the subcommand and its options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    space = sub.add_parser("check-space", help="fail unless BYTES more fit on the filesystem of PATH")
    space.add_argument("--path", required=True)
    space.add_argument("--need", type=int, required=True)
    space.add_argument("--expected", type=int)
    space.add_argument("--present", type=int)
    space.add_argument("--expected-from", help="where the expected size comes from, said in the message")
    for name in ("finish", "adopt", "mirror"):
        command = sub.add_parser(name)
        command.add_argument("--dir", required=True)
        command.add_argument("--name", required=True)
        command.add_argument("--sha256", required=True)
        command.add_argument("--size", type=int, required=True)
        if name == "mirror":
            command.add_argument("--url", required=True)
        else:
            command.add_argument("--source", required=True)
            command.add_argument("--origin", required=True)
    sub.add_parser("verify").add_argument("--dir", required=True)
    hub = sub.add_parser("hf-download", help="download a pinned Hugging Face revision (huggingface_hub venv)")
    hub.add_argument("--dir", required=True)
    size = sub.add_parser("hf-size", help="the size of a revision's wanted files, as the hub lists them (JSON)")
    for command in (hub, size):
        command.add_argument("--repo", required=True)
        command.add_argument("--revision", required=True)
        command.add_argument("--allow", action="append", default=[])
        command.add_argument("--token-file", help="env file holding HF_TOKEN=..., mode 0600")
        command.add_argument("--endpoint", help="the Hub's address (default: huggingface_hub's, https://huggingface.co)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    # Run through the importable module, so hf_source and this script share one WeightsError class.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import weights_tool

    sys.exit(weights_tool.main())
