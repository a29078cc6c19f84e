"""Controller-side report on a real result file: verdict against floors, markdown table, PNG plot."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from rigforge.bench_runs.report import Floor, judge, render_markdown, render_plot
from rigforge.profile import Floor as ProfileFloor
from tests.bench_support.captured import capture_text


@pytest.fixture
def result() -> dict[str, Any]:
    """A real result: python3.9 -m rigforge.bench against Gemma 270M on xllamacpp (see captures/README.md)."""
    return json.loads(capture_text("result_gemma_sandbox.json"))


def cell(result: dict[str, Any], concurrency: int, input_tokens: int) -> dict[str, Any]:
    """The cell of a result for (concurrency, input_tokens)."""
    return next(c for c in result["cells"] if c["concurrency"] == concurrency and c["input_tokens"] == input_tokens)


def test_floors_below_the_measurement_pass(result: dict[str, Any]) -> None:
    measured = cell(result, 1, 48)["metrics"]
    floor = Floor(1, 48, measured["output_throughput"] * 0.5, measured["decode_tps_per_user"]["median"] * 0.5)
    verdict = judge(result, [floor])
    assert verdict.passed, verdict.render()
    assert "floor C=1 in=48" in verdict.render()
    assert verdict.render().endswith("bench verdict: PASS (0 of 3 failed)")


def test_a_floor_above_the_measurement_fails_with_numbers(result: dict[str, Any]) -> None:
    measured = cell(result, 2, 160)["metrics"]
    floor = {"concurrency": 2, "input_tokens": 160, "min_output_tps": measured["output_throughput"] * 2 + 1}
    verdict = judge(result, [floor])
    assert not verdict.passed
    (line,) = [line for line in verdict.lines if line.name == "floor C=2 in=160"]
    assert not line.passed
    assert f"{measured['output_throughput']:.1f} tok/s" in line.detail


def test_profile_floor_objects_are_accepted(result: dict[str, Any]) -> None:
    floor = ProfileFloor(concurrency=1, input_tokens=160, min_output_tps=0.0, min_decode_tps_per_user=1e9)
    verdict = judge(result, [floor])
    assert not verdict.passed
    assert "decode/user median" in verdict.lines[-1].detail


def test_failed_cells_and_probes_fail_and_show_no_numbers(result: dict[str, Any]) -> None:
    broken = copy.deepcopy(result)
    target = cell(broken, 2, 48)
    target.update(status="failed", reason="garbage: worst U+FFFD/control share 0.59", metrics=None)
    broken["sanity"]["probes"][0].update(passed=False, detail="'...A:' -> ' London'")
    verdict = judge(broken, [Floor(2, 48, 0.0, 0.0), Floor(4, 48, 0.0, 0.0)])
    failed = {line.name: line.detail for line in verdict.lines if not line.passed}
    assert set(failed) == {"sanity probe_capital", "cell C=2 in=48", "floor C=2 in=48", "floor C=4 in=48"}
    assert "garbage" in failed["floor C=2 in=48"]
    assert failed["floor C=4 in=48"] == "no such cell in the result"
    table = render_markdown(broken)
    (row,) = [line for line in table.splitlines() if line.startswith("| 2 | 48 |")]
    assert "FAILED: garbage" in row
    assert row.count("|") == table.splitlines()[table.splitlines().index(row) - 2].count("|")


def test_markdown_has_metadata_sanity_and_one_row_per_cell(result: dict[str, Any]) -> None:
    table = render_markdown(result)
    assert table.startswith("## Bench result: OK")
    assert "- profile: sandbox" in table
    assert "- sanity probe_capital: ok" in table
    rows = [line for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == len(result["cells"]) == 4
    header = next(line for line in table.splitlines() if line.startswith("| C |"))
    assert all(row.count("|") == header.count("|") for row in rows)


def test_plot_is_written_as_png(result: dict[str, Any], tmp_path: Path) -> None:
    path = render_plot(result, tmp_path / "plots" / "bench.png")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 10_000


def test_empty_result_fails(result: dict[str, Any]) -> None:
    assert not judge({"cells": [], "sanity": {"probes": []}}, []).passed


def test_floors_name_completion_cells_and_other_kinds_get_their_own_table(result: dict[str, Any]) -> None:
    """A chat cell of the same size beside a completion cell: the floor reads the completion cell only."""
    chat_cell = copy.deepcopy(cell(result, 1, 48))
    chat_cell.update(endpoint="chat", thinking=True, status="failed", reason="repetition: looped", metrics=None)
    result["cells"].append(chat_cell)
    measured = cell(result, 1, 48)["metrics"]
    verdict = judge(result, [Floor(1, 48, measured["output_throughput"] * 0.5)])
    lines = {line.name: line for line in verdict.lines}
    assert lines["floor C=1 in=48"].passed  # not the failed chat cell of the same size
    assert lines["cell C=1 in=48 (chat, thinking on)"].detail == "failed: repetition: looped"
    report = render_markdown(result)
    assert report.count("| C | in | out |") == 2 and "chat, thinking on cells (chat endpoint" in report
    assert "FAILED: repetition: looped" in report.split("chat, thinking on cells")[1]
