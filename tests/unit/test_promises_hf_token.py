"""Promise: the Hugging Face token is read only from a file its owner alone can read, and handed over whole
(rigforge/remote/hf_source.py; its end-to-end run through weights_tool.py: tests/unit/test_hf_source.py)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

import rigforge.remote

TOKEN = "hf_not_a_real_token_0123456789"
#: Characters a token may hold that an env file's syntax also uses.
AWKWARD = "Xhf_tok=en/with+base64=X"


@pytest.fixture(scope="module")
def hf_source() -> ModuleType:
    # On the rig weights_tool.py sits beside hf_source.py and is imported by that name.
    remote_dir = str(Path(rigforge.remote.__file__).parent)
    sys.path.insert(0, remote_dir)
    try:
        return importlib.import_module("rigforge.remote.hf_source")
    finally:
        sys.path.remove(remote_dir)


def token_file(tmp_path: Path, text: str, mode: int = 0o600) -> str:
    path = tmp_path / "hf.env"
    path.write_text(text)
    path.chmod(mode)
    return str(path)


@pytest.mark.parametrize("text", [
    f"HF_TOKEN={TOKEN}\n",
    f"# the rig's token\nOTHER=x\n HF_TOKEN = '{TOKEN}' \n",
    f'HF_TOKEN="{TOKEN}"\nHF_TOKEN=second\n',
    f"HF_TOKEN={TOKEN}",
])
def test_the_token_is_read_whole_from_its_owner_only_file(hf_source: ModuleType, tmp_path: Path, text: str) -> None:
    assert hf_source.read_token(token_file(tmp_path, text)) == TOKEN


def test_a_token_with_equals_signs_and_quote_like_ends_is_handed_over_whole(
        hf_source: ModuleType, tmp_path: Path) -> None:
    assert hf_source.read_token(token_file(tmp_path, f"HF_TOKEN={AWKWARD}\n")) == AWKWARD
    assert hf_source.read_token(token_file(tmp_path, f"HF_TOKEN='{AWKWARD}'\n")) == AWKWARD


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644, 0o610])
def test_a_token_file_others_can_read_is_refused_without_showing_the_token(
        hf_source: ModuleType, tmp_path: Path, mode: int) -> None:
    path = token_file(tmp_path, f"HF_TOKEN={TOKEN}\n", mode)
    with pytest.raises(hf_source.WeightsError) as refused:
        hf_source.read_token(path)
    assert str(refused.value) == f"{path} must be readable by its owner only (mode 0600)"
    assert TOKEN not in str(refused.value)


@pytest.mark.parametrize("text", ["", "HF_TOKEN=\n", "HF_TOKEN=''\n", "OTHER_HF_TOKEN=x\n", "HF_TOKEN x\n"])
def test_no_token_in_the_file_means_anonymous(hf_source: ModuleType, tmp_path: Path, text: str) -> None:
    assert hf_source.read_token(token_file(tmp_path, text)) is None


def test_no_file_means_anonymous(hf_source: ModuleType, tmp_path: Path) -> None:
    assert hf_source.read_token(None) is None and hf_source.read_token("") is None
    assert hf_source.read_token(str(tmp_path / "absent.env")) is None
