"""Say what an engine image is, from inside it: git checkouts, pip freeze, and the stack's versions.

Run as the last step of every engine image build (templates/images/_contents.Dockerfile.j2); it writes one JSON
file (``/etc/rigforge/image.json``), which rigforge also copies beside the build log on the rig:

- ``checkouts``: each git checkout the build made (the build arg that named it -> path and the commit at HEAD,
  read from ``.git`` itself, so the file says what was checked out, not what was asked for);
- ``versions``: CUDA (the toolkit in the image), torch (and the CUDA it was built for), FlashInfer, CUTLASS (every
  copy found: a checkout, the headers FlashInfer bundles, the CuTe DSL wheel) and the engine;
- ``pip_freeze``: every installed distribution as ``name==version`` (importlib.metadata: also in a venv made
  without pip), editable installs with where they come from. A version range in the Dockerfile
  (``torch==2.11.*``) shows here as what it resolved to.

Usage:
    python3 image_contents.py --engine vllm --checkout VLLM_REF=/build/vllm --out /etc/rigforge/image.json
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
from pathlib import Path

#: The distribution that is each engine (llama.cpp is a binary: its checkout names it).
ENGINE_DISTRIBUTIONS = {"vllm": ("vllm",), "sglang": ("sglang",), "llama.cpp": ()}
NOT_FOUND = None


def checkout_commit(path: Path) -> str | None:
    """The commit at HEAD of a git checkout, read from its ``.git`` folder (no git needed)."""
    git = path / ".git"
    try:
        head = (git / "HEAD").read_text().strip()
    except OSError:
        return None
    if not head.startswith("ref: "):
        return head  # detached: the commit itself
    ref = head[5:]
    loose = git / ref
    if loose.is_file():
        return loose.read_text().strip()
    packed = git / "packed-refs"
    if packed.is_file():
        for line in packed.read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split(" ", 1)[0]
    return None


def distribution_version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def package_dir(name: str) -> Path | None:
    """Where an importable package lives, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def cutlass_header_version(include: Path) -> str | None:
    """``MAJOR.MINOR.PATCH`` from CUTLASS's ``cutlass/version.h``."""
    try:
        text = (include / "cutlass" / "version.h").read_text()
    except OSError:
        return None
    parts = [re.search(rf"#define CUTLASS_{part} (\d+)", text) for part in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(match.group(1) for match in parts) if all(parts) else None


def cuda_version() -> str | None:
    """The CUDA toolkit of the image: /usr/local/cuda/version.json, else the CUDA_VERSION the base image sets."""
    try:
        return json.loads(Path("/usr/local/cuda/version.json").read_text())["cuda"]["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return os.environ.get("CUDA_VERSION") or None


def torch_cuda() -> str | None:
    """The CUDA torch was built for, read from torch/version.py (importing torch takes seconds and a GPU check)."""
    folder = package_dir("torch")
    if folder is None:
        return None
    try:
        text = (folder / "version.py").read_text()
    except OSError:
        return None
    match = re.search(r"^cuda(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return match.group(1) if match else None


def cutlass_versions(checkouts: dict[str, Path]) -> dict[str, str]:
    found: dict[str, str] = {}
    for arg, path in checkouts.items():
        version = cutlass_header_version(path / "include")
        if version:
            found[f"checkout {arg} ({path})"] = version
    flashinfer = package_dir("flashinfer")
    if flashinfer is not None:
        version = cutlass_header_version(flashinfer / "data" / "cutlass" / "include")
        if version:
            found["bundled with flashinfer"] = version
    dsl = distribution_version("nvidia-cutlass-dsl")
    if dsl:
        found["nvidia-cutlass-dsl"] = dsl
    return found


def freeze() -> list[str]:
    """Every installed distribution, ``name==version``; an editable install says where it comes from."""
    lines = set()
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        line = f"{name}=={dist.version}"
        direct = dist.read_text("direct_url.json")
        if direct:
            try:
                url = json.loads(direct)
            except ValueError:
                url = {}
            if (url.get("dir_info") or {}).get("editable"):
                line += f"  # editable from {url.get('url', '?')}"
        lines.add(line)
    return sorted(lines, key=str.lower)


def contents(engine: str, checkouts: dict[str, Path]) -> dict:
    engine_names = ENGINE_DISTRIBUTIONS.get(engine, (engine,))
    return {
        "checkouts": {arg: {"path": str(path), "commit": checkout_commit(path)} for arg, path in checkouts.items()},
        "versions": {
            "python": ".".join(str(part) for part in sys.version_info[:3]),
            "cuda": cuda_version(),
            "torch": distribution_version("torch"),
            "torch_cuda": torch_cuda(),
            "flashinfer": distribution_version("flashinfer-python", "flashinfer"),
            "cutlass": cutlass_versions(checkouts),
            "engine": {"kind": engine, "version": distribution_version(*engine_names) if engine_names else None},
        },
        "pip_freeze": freeze(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--engine", required=True)
    parser.add_argument("--checkout", action="append", default=[], metavar="ARG=PATH")
    parser.add_argument("--out", required=True)
    options = parser.parse_args(argv)
    checkouts = dict(item.split("=", 1) for item in options.checkout)
    document = contents(options.engine, {arg: Path(path) for arg, path in checkouts.items()})
    missing = [arg for arg, entry in document["checkouts"].items() if not entry["commit"]]
    if missing:
        print(f"image_contents: no git checkout at {', '.join(str(checkouts[a]) for a in missing)}", file=sys.stderr)
        return 1
    out = Path(options.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    versions = document["versions"]
    print(f"image_contents: {len(document['pip_freeze'])} distributions; cuda {versions['cuda']}, torch "
          f"{versions['torch']}, flashinfer {versions['flashinfer']}, engine {versions['engine']['version']}; "
          + ", ".join(f"{arg} {entry['commit']}" for arg, entry in document["checkouts"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
