"""Promise: the health wait names every known failure in the journal it was given, and a hang signature counts
only when the start really hung (rigforge/known_failures/match.py, run on the rig as ``main``). Signatures from
inventory/known-failures.yaml; journal lines are the ones its captures hold (tests/fixtures/known-failures/).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rigforge.known_failures import hit_line, match_lines, signature_data
from rigforge.known_failures.match import main

ALL = signature_data()
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "known-failures"
PORT_IN_USE = (FIXTURES / "llama-port-in-use.txt").read_text().splitlines()
NCCL_HANG = "INFO 11-26 vLLM is using nccl==2.28.9"


def journal(tmp_path: Path, lines: list[str], tail: bytes = b"") -> str:
    """A journal file as the wait script writes it; ``tail``: raw bytes after the lines (a half-written line)."""
    path = tmp_path / "journal.txt"
    path.write_bytes("\n".join(lines).encode() + b"\n" + tail)
    return str(path)


def run_main(signatures: list, argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(signatures, argv) == 0
    return capsys.readouterr().out.splitlines()


def test_the_rig_side_matcher_prints_one_line_per_failure_in_the_journal(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = [hit_line(hit) for hit in match_lines(ALL, PORT_IN_USE, "startup")]
    assert len(expected) == 1 and expected[0].startswith("known failure llama-port-in-use (")
    # A journal cut inside a multi-byte character (invalid UTF-8) is still read.
    assert run_main(ALL, [journal(tmp_path, PORT_IN_USE, tail=b"\xe2\x82")], capsys) == expected


def test_the_rig_side_matcher_counts_a_hang_line_only_when_told_the_start_hung(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = journal(tmp_path, ["INFO starting", NCCL_HANG])
    assert run_main(ALL, [path], capsys) == []
    hung = run_main(ALL, [path, "--hung"], capsys)
    assert len(hung) == 1 and hung[0].startswith("known failure nccl-init-hang (fail): NCCL init hangs")


def test_a_healthy_journal_prints_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    healthy = (FIXTURES / "llama-healthy-start.txt").read_text().splitlines()
    assert run_main(ALL, [journal(tmp_path, healthy), "--hung"], capsys) == []


def test_a_hang_line_in_a_start_not_said_to_hang_is_nothing() -> None:
    assert match_lines(ALL, [NCCL_HANG], "startup") == []
    assert [hit.id for hit in match_lines(ALL, [NCCL_HANG], "startup", hung=True)] == ["nccl-init-hang"]
