"""Promise: a recipe whose bench run failed is disqualified, never ranked (rigforge/recipes/report.py).

The bench results are the recorded sandbox run of tests/fixtures/recipes/ (README there), with one cell's status
changed to each way a cell fails.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from rigforge.profile.loader import load_profile
from rigforge.recipes.report import DISQUALIFIED, START, Trial, build_report, wrong_output
from rigforge.updates.comparison import RegressionPolicy

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recipes"
POLICY = RegressionPolicy.from_profile(load_profile("sandbox"))


def recorded(recipe: str) -> dict[str, Any]:
    return json.loads((RECORDED / f"result-{recipe}.json").read_text())


def with_failed_cell(status: str, reason: str) -> dict[str, Any]:
    """The default recipe's recorded result, its last cell failed, and measured twice as fast as before."""
    result = copy.deepcopy(recorded("default"))
    cell = result["cells"][-1]
    cell.update(status=status, reason=reason)
    for other in result["cells"]:
        for block in [*other["repeats"], other["metrics"]]:
            if block:
                block["decode_tps_per_user"]["median"] *= 2
                block["output_throughput"] *= 2
    return result


@pytest.mark.parametrize(("status", "reason"), [("failed", "HTTP 500: engine died"), ("timeout", "no answer in 60 s")])
def test_a_recipe_whose_bench_cell_failed_is_disqualified_even_when_faster(status: str, reason: str) -> None:
    result = with_failed_cell(status, reason)
    cell = result["cells"][-1]
    why = wrong_output(result)
    assert why == f"cell C={cell['concurrency']} in={cell['input_tokens']} failed: {reason}"
    report = build_report([Trial("default", "d", "s", recorded("default"), "results/x/default"),
                           Trial("fast", "d", "s", result, "results/x/fast", why)], "default", POLICY)
    assert [verdict.verdict for verdict in report.verdicts] == [START, DISQUALIFIED]
    assert report.best is None and report.passed == ("default",)


def test_a_failed_check_disqualifies_and_a_clean_run_does_not() -> None:
    result = copy.deepcopy(recorded("default"))
    assert wrong_output(result) == ""
    result["failed_checks"] = ["a", "b", "c", "d", "e"]
    assert wrong_output(result) == "failed checks: a, b, c, d"
