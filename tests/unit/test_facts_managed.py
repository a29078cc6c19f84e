"""ManagedByRigforge: its command run for real by sh on files of each kind, and its parser on garbled output."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rigforge.facts.managed import MARKER_TEXT, ManagedByRigforge, parse_managed


def _read(path: Path) -> bool | None:
    fact = ManagedByRigforge()
    run = subprocess.run(["sh", "-c", fact.command(str(path))], capture_output=True, text=True, check=True)
    return fact.process(run.stdout.splitlines())


def test_each_kind_of_file(tmp_path: Path) -> None:
    ours = tmp_path / "nccl.conf"
    ours.write_text(f"# {MARKER_TEXT}: edits are overwritten\nNCCL_P2P_LEVEL=SYS\n")
    owners = tmp_path / "owner's file.conf"  # a space: the path is quoted
    owners.write_text("NCCL_P2P_LEVEL=PIX\n")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    folder = tmp_path / "a-folder"
    folder.mkdir()

    assert _read(ours) is True
    assert _read(owners) is False
    assert _read(tmp_path / "missing") is None
    assert _read(dangling) is False  # something is there: never treated as absent, never removed
    assert _read(folder) is False


@pytest.mark.parametrize("output", [[], [""], ["yes"], ["missing", "rigforge"], ["sh: 1: grep: not found"]])
def test_garbled_output_is_an_error_naming_the_fact(output: list[str]) -> None:
    with pytest.raises(ValueError, match="ManagedByRigforge"):
        parse_managed(output)
