"""The quality veto over every engine start's pass of a recipe (rigforge/quality/over_starts.py): answers differ only
when each start clears the tolerance and the A/A noise, the starting recipe's own passes count as A/A of the
reference, and one start past the tolerance, a missing or a failed pass is ``cannot tell``. Passes are scripted
per start (each start's ``quality.against_reference`` as roles/quality.py writes it); the speed side is
tests/unit/test_promises_recipe_report.py's three starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rigforge.quality.judge import DIFFER, OFF, SAME_ANSWERS, UNKNOWN
from rigforge.quality.over_starts import judge_over_starts
from rigforge.recipes.quality_plot import render_quality_plot
from rigforge.recipes.quality_veto import ANSWERS_DIFFER
from rigforge.recipes.report import build_report, report_json, report_markdown
from rigforge.updates.verdict import BETTER, CANNOT_TELL
from tests.unit.test_promises_recipe_report import CHAT, POLICY, measured, side_trial

TOLERANCE = 0.01
SOURCE = "imported 2026-11-27T09:40Z from /x/bf16.json (recipe bf16)"


def compared(mean: float | None, noise: float | None = 0.0007, refused: str | None = None,
             reference_recipe: str | None = "default") -> dict[str, Any]:
    """One start's ``quality`` block: a pass compared with the reference at ``mean`` (None with ``refused``)."""
    return {"texts": [], "against_reference": {
        "mean_kld": mean, "p99_kld": None if mean is None else mean * 5, "same_top_percent": 90.0, "positions": 128,
        "refused": refused, "first_divergence": None if mean is None else "eccl-1 token 1: ' wind' became ' waters'",
        "text_kld": {} if mean is None else {"eccl-1": mean * 0.8, "prov-6": mean * 1.2},
        "reference": "gemma@a5fd", "reference_recipe": reference_recipe, "reference_source": SOURCE,
        "tolerance": TOLERANCE, "noise": None if noise is None else {"mean_kld": noise}}}


def recipe(name: str, speed: float, *passes: dict[str, Any] | None) -> Any:
    """A recipe measured in one engine start per pass at ``speed`` times the start (None: that start ran none)."""
    results = measured(speed, 1.0, CHAT) * 2
    return side_trial(name, [{**result, **({"quality": quality} if quality is not None else {})}
                             for result, quality in zip(results, passes, strict=False)])


def test_every_start_past_the_tolerance_and_the_noise_is_answers_differ() -> None:
    judged = judge_over_starts([{"quality": compared(mean)} for mean in (0.045, 0.047, 0.043)])
    assert judged.state == DIFFER and judged.per_start == (0.045, 0.047, 0.043) and judged.mean_kld == 0.045
    assert judged.line.startswith("answers differ in all 3 starts (mean KLD 0.0450, 0.0470, 0.0430; each interval "
                                  "past the tolerance 0.01 and the A/A noise 0.0007)")
    assert judged.reference == f"gemma@a5fd ({SOURCE})"


def test_one_start_of_three_past_the_tolerance_cannot_tell() -> None:
    judged = judge_over_starts([{"quality": compared(mean)} for mean in (0.002, 0.045, 0.001)])
    assert judged.state == UNKNOWN
    assert "answers differ in start 2 of 3; answers same in starts 1, 3 of 3" in judged.line
    assert "a claim needs every start's interval past the tolerance 0.01 and the A/A noise 0.0007, or" in judged.line


def test_a_missing_or_failed_pass_in_one_start_cannot_tell() -> None:
    missing = judge_over_starts([{"quality": compared(0.045)}, {}, {"quality": compared(0.046)}])
    assert missing.state == UNKNOWN and "start 2: no quality pass" in missing.line
    assert missing.per_start == (0.045, None, 0.046)
    failed = compared(None, refused="no position could be compared: eccl-1: engine error 500")
    judged = judge_over_starts([{"quality": compared(0.045)}, {"quality": failed}])
    assert judged.state == UNKNOWN and "start 2: no position could be compared" in judged.line
    assert judge_over_starts([{}, {}]).state == OFF  # the profile ran no pass: speed alone decides


def test_every_start_within_the_tolerance_is_the_same_answers() -> None:
    judged = judge_over_starts([{"quality": compared(mean)} for mean in (0.0, 0.002, 0.0007)])
    assert judged.state == SAME_ANSWERS and judged.line.startswith("answers same in all 3 starts")


def test_the_start_recipes_passes_are_a_and_raise_the_noise_a_claim_must_clear() -> None:
    recipe_starts = [{"quality": compared(mean)} for mean in (0.015, 0.016, 0.014)]
    quiet = [{"quality": compared(mean)} for mean in (0.0, 0.001, 0.0)]
    assert judge_over_starts(recipe_starts, quiet).state == DIFFER
    noisy = [{"quality": compared(mean)} for mean in (0.0, 0.009, 0.002)]  # one start of the reference moved
    noisy[1]["quality"]["against_reference"]["interval"] = [0.004, 0.018]  # its interval's top: the A/A bound
    judged = judge_over_starts(recipe_starts, noisy)
    assert judged.state == UNKNOWN and judged.noise_kld == 0.018
    assert "start 1: mean KLD 0.0150: past the tolerance 0.01 but not clear of the A/A noise 0.0180" in judged.line
    unmeasured = [{"quality": compared(mean, noise=None)} for mean in (0.015, 0.016)]
    assert judge_over_starts(unmeasured).state == UNKNOWN  # no A/A at all: past the tolerance is not a claim
    assert judge_over_starts(unmeasured, quiet).state == DIFFER  # this tournament's A/A measured it


def test_a_start_that_recorded_the_reference_is_left_out() -> None:
    recorded = {"quality": {"texts": [], "against_reference": {"recorded": True, "reference": "gemma@a5fd"}}}
    judged = judge_over_starts([recorded, {"quality": compared(0.0)}, {"quality": compared(0.001)}])
    assert judged.state == SAME_ANSWERS and "start 1 recorded the reference" in judged.line


def test_the_tournament_vetoes_on_every_start_and_the_report_and_chart_say_so(tmp_path: Path) -> None:
    trials = [recipe("default", 1.0, compared(0.0), compared(0.0004), compared(0.0)),
              recipe("kv-q4", 1.5, compared(0.045), compared(0.044), compared(0.046)),
              recipe("flaky", 1.5, compared(0.001), compared(0.045), compared(0.001)),
              recipe("gap", 1.5, compared(0.001), None, compared(0.001)),
              recipe("fast", 1.2, compared(0.001), compared(0.0), compared(0.002))]
    report = build_report(trials, "default", POLICY)
    verdicts = {verdict.recipe: verdict for verdict in report.verdicts}
    assert {name: verdict.verdict for name, verdict in verdicts.items()} == {
        "default": "start", "kv-q4": ANSWERS_DIFFER, "flaky": CANNOT_TELL, "gap": CANNOT_TELL, "fast": BETTER}
    assert report.best == "fast"
    assert verdicts["kv-q4"].detail.startswith("faster, answers differ in all 3 starts (mean KLD 0.0450, 0.0440, "
                                               "0.0460; each interval past the tolerance 0.01 and the A/A noise "
                                               "0.0007")
    assert verdicts["flaky"].detail.startswith("faster, but quality cannot tell (answers differ in start 2 of 3")
    data = {entry["recipe"]: entry for entry in report_json(report, "h", "s")["recipes"]}
    assert data["kv-q4"]["quality"]["mean_kld_per_start"] == [0.045, 0.044, 0.046]
    assert data["kv-q4"]["quality"]["mean_kld"] == 0.045 and data["kv-q4"]["quality"]["state"] == DIFFER
    assert data["gap"]["quality"]["starts"][1] is None and data["fast"]["quality"]["reference"].endswith(f"({SOURCE})")
    json.dumps(report_json(report, "h", "s"), allow_nan=False)
    text = report_markdown(report, "h", "s")
    assert f"- reference: gemma@a5fd ({SOURCE})" in text
    assert "- **default** (the start; its passes are A/A of the reference): answers same in all 3 starts" in text
    assert "- **gap**: quality cannot tell (answers same in starts 1, 3 of 3; start 2: no quality pass" in text
    png = render_quality_plot(report, tmp_path / "quality.png", "rig")
    assert png is not None and png.stat().st_size > 10_000
