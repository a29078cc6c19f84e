"""Apply a unified diff to a source tree: exact, all-or-nothing, and idempotent.

Usage:
    python3 apply_patch.py PATCH [--root DIR | --package NAME] [-p N] [--sha256 HEX] [--check]

Paths in the patch are git style (``a/x`` / ``b/x``) and lose ``-p`` leading components (default 1);
what remains is taken relative to ``--root`` (default: the current directory) or to the directory of
an installed package (``--package flashinfer`` finds ``.../site-packages/flashinfer`` without importing
it), so a patch written against FlashInfer's package root applies to an installed copy.

Every context line must match exactly (no fuzz); a hunk may sit at another line number when its lines
match there. Every file is checked before any is written; new contents go to a temporary file next to
each target and are renamed over it only after all of them are ready. A patch whose reverse applies
cleanly is "already applied": nothing is written.

Exit codes (the one-line report starts with the same state: applied-now, already-applied, not-applied,
conflict; conflicts and errors go to stderr):
    0  applied now, or already applied (with --check: already applied, nothing to do)
    1  conflict: the tree matches neither side of the patch (file, hunk and first differing line on stderr)
    2  bad input: unreadable or malformed patch, wrong --sha256, unsafe path, unknown package
    3  --check only: not applied yet, and it would apply cleanly

Example:
    python3 apply_patch.py k64.patch --package flashinfer --sha256 9f2c...e1 --check
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import os
import posixpath
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

EXIT_OK, EXIT_CONFLICT, EXIT_BAD_INPUT, EXIT_NOT_APPLIED = 0, 1, 2, 3
HUNK_HEADER = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
UNSUPPORTED = (b"GIT binary patch", b"Binary files ", b"rename from ", b"copy from ")


class PatchError(Exception):
    """The patch or the arguments are unusable (exit code 2)."""


class Conflict(Exception):
    """The tree does not match the side of the patch being applied."""


@dataclass
class Hunk:
    header: str
    old_start: int
    new_start: int
    old_lines: list[bytes]
    new_lines: list[bytes]

    def reversed(self) -> Hunk:
        return Hunk(self.header, self.new_start, self.old_start, self.new_lines, self.old_lines)


@dataclass
class FilePatch:
    old_path: str | None  # None: /dev/null, the patch creates the file
    new_path: str | None  # None: /dev/null, the patch deletes the file
    hunks: list[Hunk]
    target: str  # the file under the root that this section changes

    def reversed(self) -> FilePatch:
        return FilePatch(self.new_path, self.old_path, [h.reversed() for h in self.hunks], self.target)


@dataclass
class Outcome:
    status: str  # "applied-now", "already-applied", "not-applied" (check only) or "conflict"
    message: str

    @property
    def exit_code(self) -> int:
        return {"conflict": EXIT_CONFLICT, "not-applied": EXIT_NOT_APPLIED}.get(self.status, EXIT_OK)


def strip_path(raw: bytes, strip: int) -> str | None:
    """Turn a ``---``/``+++`` path into a safe relative path; None for /dev/null."""
    try:
        name = raw.split(b"\t")[0].rstrip(b"\r\n").decode("utf-8")
    except UnicodeDecodeError as error:
        raise PatchError(f"path is not UTF-8: {raw!r}") from error
    if name == "/dev/null":
        return None
    if name.startswith('"'):
        raise PatchError(f"quoted path {name} is not supported")
    parts = [p for p in name.split("/") if p not in ("", ".")][strip:]
    relative = posixpath.join(*parts) if parts else ""
    if not relative or (name.startswith("/") and strip == 0) or ".." in parts:
        raise PatchError(f"unsafe or empty path after -p{strip}: {name!r}")
    return relative


def split_lines(data: bytes) -> list[bytes]:
    """Split on LF only, keeping it (bytes.splitlines would also split on a lone CR)."""
    lines = [line + b"\n" for line in data.split(b"\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def parse_hunk(lines: list[bytes], start: int) -> tuple[Hunk, int]:
    """Read the hunk whose ``@@`` header is ``lines[start]``; return it and the index after it."""
    match = HUNK_HEADER.match(lines[start])
    if not match:
        raise PatchError(f"malformed hunk header: {lines[start]!r}")
    old_n = int(match.group(2) or "1")
    new_n = int(match.group(4) or "1")
    hunk = Hunk(match.group(0).decode(), int(match.group(1)), int(match.group(3)), [], [])
    index, last_kind = start + 1, b" "
    while (
        len(hunk.old_lines) < old_n
        or len(hunk.new_lines) < new_n
        or (index < len(lines) and lines[index].startswith(b"\\"))
    ):
        if index >= len(lines):
            raise PatchError(f"patch ends inside hunk {hunk.header}")
        line = lines[index]
        kind, text = line[:1], line[1:]
        if line in (b"\n", b"\r\n"):  # blank context line whose leading space was trimmed
            kind, text = b" ", line
        if kind == b"\\":  # "\ No newline at end of file" belongs to the previous line
            for side, marked in ((hunk.old_lines, b" -"), (hunk.new_lines, b" +")):
                if last_kind in marked and side:
                    side[-1] = side[-1].rstrip(b"\n")
        elif kind in (b" ", b"-", b"+"):
            if kind != b"+":
                hunk.old_lines.append(text)
            if kind != b"-":
                hunk.new_lines.append(text)
            last_kind = kind
        else:
            raise PatchError(f"hunk {hunk.header} is shorter than its header says")
        index += 1
    if len(hunk.old_lines) != old_n or len(hunk.new_lines) != new_n:
        raise PatchError(f"hunk {hunk.header} is longer than its header says")
    return hunk, index


def parse_patch(data: bytes, strip: int = 1) -> list[FilePatch]:
    """Parse a unified diff; text outside file sections (headers, ``diff --git``, ``index``) is ignored."""
    lines = split_lines(data)
    patches: list[FilePatch] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith(UNSUPPORTED):
            raise PatchError(f"unsupported patch content: {line.decode(errors='replace').strip()}")
        if line.startswith(b"--- ") and index + 1 < len(lines) and lines[index + 1].startswith(b"+++ "):
            old, new = strip_path(line[4:], strip), strip_path(lines[index + 1][4:], strip)
            if old is None and new is None:
                raise PatchError("file section with /dev/null on both sides")
            target = new or old or ""
            if any(p.target == target for p in patches):
                raise PatchError(f"{target} has two file sections; merge them into one")
            patches.append(FilePatch(old, new, [], target))
            index += 2
        elif line.startswith(b"@@ "):
            if not patches:
                raise PatchError("hunk before any file header")
            hunk, index = parse_hunk(lines, index)
            patches[-1].hunks.append(hunk)
        else:
            index += 1
    if not patches:
        raise PatchError("no file sections found: not a unified diff")
    return patches


def find_hunk(lines: list[bytes], old: list[bytes], expected: int, lowest: int) -> int | None:
    """Index where ``old`` matches exactly, nearest to ``expected`` and not before ``lowest``."""
    if not old:
        return expected if lowest <= expected <= len(lines) else None
    for distance in range(len(lines) + 1):
        for position in (expected - distance, expected + distance) if distance else (expected,):
            if lowest <= position <= len(lines) - len(old) and lines[position : position + len(old)] == old:
                return position
    return None


def first_difference(lines: list[bytes], hunk: Hunk, position: int) -> str:
    """Describe the first line of ``hunk`` that differs from the file at ``position``."""
    for offset, wanted in enumerate(hunk.old_lines):
        found = lines[position + offset] if 0 <= position + offset < len(lines) else None
        if found != wanted:
            shown = "end of file" if found is None else repr(found.decode(errors="replace").rstrip("\n"))
            expected = repr(wanted.decode(errors="replace").rstrip("\n"))
            return f"line {position + offset + 1}: expected {expected}, found {shown}"
    return "its lines match only before an earlier hunk"


def patch_lines(lines: list[bytes], patch: FilePatch) -> list[bytes]:
    """Apply every hunk of ``patch`` to ``lines`` exactly; raise Conflict naming the first bad hunk."""
    result: list[bytes] = []
    consumed, drift = 0, 0  # drift: how far the file has moved from the patch's line numbers
    for number, hunk in enumerate(patch.hunks, 1):
        # "-5,0" means "after line 5", so an empty old side starts one line later
        base = max(hunk.old_start - (1 if hunk.old_lines else 0), 0)
        position = find_hunk(lines, hunk.old_lines, base + drift, consumed)
        if position is None:
            detail = first_difference(lines, hunk, max(base + drift, consumed))
            raise Conflict(f"{patch.target}: hunk {number} {hunk.header} does not match; {detail}")
        drift = position - base
        result += lines[consumed:position] + hunk.new_lines
        consumed = position + len(hunk.old_lines)
    return result + lines[consumed:]


def planned_content(patch: FilePatch, root: str) -> bytes | None:
    """New content of the patch's file (None: delete it), or Conflict if the tree does not match."""
    path = os.path.join(root, patch.target)
    exists = os.path.isfile(path)
    if patch.old_path is None and exists:
        raise Conflict(f"{patch.target}: the patch creates this file but it already exists")
    if patch.old_path is not None and not exists:
        raise Conflict(f"{patch.target}: file not found under {root}")
    current = b""
    if exists:
        with open(path, "rb") as handle:
            current = handle.read()
    new_lines = patch_lines(split_lines(current), patch)
    if patch.new_path is None:
        if new_lines:
            raise Conflict(f"{patch.target}: the patch deletes this file but it holds other content")
        return None
    return b"".join(new_lines)


def plan_all(patches: list[FilePatch], root: str) -> list[tuple[str, bytes | None]]:
    """Check every file first; return (path, new content or None to delete) for each."""
    return [(os.path.join(root, p.target), planned_content(p, root)) for p in patches]


def write_atomically(plan: list[tuple[str, bytes | None]]) -> None:
    """Write all new contents to temp files, then rename them into place, then delete removed files."""
    ready: list[tuple[str, str]] = []
    try:
        for path, content in plan:
            if content is None:
                continue
            directory = os.path.dirname(path) or "."
            os.makedirs(directory, exist_ok=True)
            handle, temp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
            ready.append((temp, path))
            with os.fdopen(handle, "wb") as out:
                out.write(content)
                out.flush()
                os.fsync(out.fileno())
            _copy_ownership(path, temp)
    except BaseException:
        for temp, _ in ready:
            os.unlink(temp)
        raise
    for temp, path in ready:
        os.replace(temp, path)
    for path, content in plan:
        if content is None:
            os.unlink(path)


def _copy_ownership(original: str, temp: str) -> None:
    """Give the temp file the original's mode (and owner when allowed); new files get 0644."""
    if not os.path.exists(original):
        os.chmod(temp, 0o644)
        return
    info = os.stat(original)
    os.chmod(temp, info.st_mode & 0o7777)
    with contextlib.suppress(PermissionError):  # unprivileged runs keep their own ownership
        os.chown(temp, info.st_uid, info.st_gid)


def verify_sha256(data: bytes, expected: str, name: str) -> None:
    """Refuse the patch unless its bytes hash to ``expected``."""
    if not re.fullmatch(r"[0-9a-fA-F]{64}", expected):
        raise PatchError(f"--sha256 for {name} is not 64 hex digits: {expected!r}")
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected.lower():
        raise PatchError(f"refusing {name}: sha256 is {actual}, expected {expected.lower()}")


def package_root(package: str) -> str:
    """Directory of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise PatchError(f"package {package!r} is not installed for {sys.executable}")
    return list(spec.submodule_search_locations)[0]


def apply_patch(
    patch_path: str, root: str = ".", strip: int = 1, sha256: str | None = None, check: bool = False
) -> Outcome:
    """Apply ``patch_path`` to ``root`` (or only report with ``check``); PatchError on bad input."""
    name = os.path.basename(patch_path)
    try:
        with open(patch_path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise PatchError(f"cannot read patch {patch_path}: {error.strerror}") from error
    if sha256 is not None:
        verify_sha256(data, sha256, name)
    if not os.path.isdir(root) or strip < 0:
        raise PatchError(f"root directory {root} does not exist" if strip >= 0 else "-p must be >= 0")
    patches = parse_patch(data, strip)
    summary = f"{name}: {len(patches)} files, {sum(len(p.hunks) for p in patches)} hunks under {root}"
    status, plan, detail = evaluate(patches, root)
    if status == "conflict":
        return Outcome(status, f"conflict {name}: {detail}")
    if status == "already-applied":
        return Outcome(status, f"already-applied {summary}; nothing to do")
    if check:
        return Outcome(status, f"not-applied {summary}; it would apply cleanly")
    write_atomically(plan)
    return Outcome("applied-now", f"applied-now {summary}")


def evaluate(patches: list[FilePatch], root: str) -> tuple[str, list[tuple[str, bytes | None]], str]:
    """Return ("not-applied", plan, ""), ("already-applied", [], "") or ("conflict", [], why)."""
    undo = [p.reversed() for p in reversed(patches)]
    try:
        plan = plan_all(patches, root)
    except Conflict as forward:
        if applies(undo, root):
            return "already-applied", [], ""
        done = [p.target for p in patches if applies([p.reversed()], root)]
        hint = f" (already patched: {', '.join(done)}; the tree is partially patched)" if done else ""
        return "conflict", [], f"{forward}{hint}"
    if applies(undo, root):
        return "conflict", [], "the tree matches both sides of the patch; refusing to guess"
    return "not-applied", plan, ""


def applies(patches: list[FilePatch], root: str) -> bool:
    """Whether every hunk of ``patches`` applies to the tree as it is."""
    try:
        plan_all(patches, root)
    except Conflict:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit code documented in the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("patch", help="unified diff file")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--root", default=".", help="directory the stripped paths are relative to")
    where.add_argument("--package", help="installed package whose directory is the root")
    parser.add_argument("-p", "--strip", type=int, default=1, help="leading path components to drop")
    parser.add_argument("--sha256", help="expected sha256 of the patch file; checked before anything else")
    parser.add_argument("--check", action="store_true", help="report the state, write nothing")
    args = parser.parse_args(argv)
    try:
        root = package_root(args.package) if args.package else args.root
        outcome = apply_patch(args.patch, root, args.strip, args.sha256, args.check)
    except PatchError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(outcome.message, file=sys.stderr if outcome.status == "conflict" else sys.stdout)
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
