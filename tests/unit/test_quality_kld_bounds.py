"""A "same" that cannot be fooled (rigforge/quality/kld.py, interval.py, judge.py, over_starts.py): passes at another
top_k compared at the common k, so a mismatch gives no false "differ"; an imported reference of another precision
judged relative to the start recipe, so the unchanged start is never "differ"; the interval decides, the rest mass
bounds "same", a teacher-forced text is scored after enough context. Real llama.cpp passes from
tests/fixtures/quality/ (README there); a pass built here is labelled as one."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

from rigforge.quality.judge import DIFFER, MAX_REST_MASS, SAME_ANSWERS, UNKNOWN, judge_quality, kld_state
from rigforge.quality.kld import compare_passes, position_kld
from rigforge.quality.over_starts import judge_over_starts
from rigforge.quality.reference import against_block, candidate_top_k

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "quality"
TOLERANCE = 0.01
KEY = "gemma-3-270m-q4_k_m.gguf@a5fd3b62230a"


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def cut_to(passed: dict[str, Any], k: int) -> dict[str, Any]:
    """The same pass as if the engine had been asked for ``k`` log-probabilities (the first k of each list)."""
    cut = copy.deepcopy(passed)
    cut["top_k"] = k
    for text in cut["texts"]:
        for step in text["steps"]:
            step["top"] = step["top"][:k]
    return cut


def judged(reference: dict[str, Any], candidate: dict[str, Any], stored: dict[str, Any] | None = None) -> Any:
    """The bench's judgement of ``candidate`` against ``reference`` (a recorded reference, its A/A zero, unless
    ``stored`` says otherwise)."""
    stored = stored or {"recipe": "default", "run": "r", "noise": {"mean_kld": 0.0, "interval": [0.0, 0.0]}}
    against = against_block(stored, KEY, compare_passes(reference, candidate).as_dict(), TOLERANCE)
    return {"texts": candidate["texts"], "against_reference": against}


def test_a_reference_at_another_top_k_is_compared_at_the_common_k_and_gives_no_false_differ() -> None:
    reference = fixture("llamacpp_pass_default.json")  # top 8, a real llama.cpp pass
    fewer = cut_to(reference, 5)
    # Compared list against list, the 3 tokens the candidate did not list sit at its floor: a false divergence.
    uncut = [position_kld(ours["top"], theirs["top"]) or 0.0 for text, other in zip(
        reference["texts"], fewer["texts"], strict=True) for ours, theirs in zip(text["steps"], other["steps"],
                                                                                strict=True)]
    assert sum(uncut) / len(uncut) > 3 * TOLERANCE  # 0.065: past the tolerance, so "differ" before the cut
    for ours, theirs in ((reference, fewer), (fewer, reference)):  # either side listing fewer
        measured = compare_passes(ours, theirs)
        assert measured.top_k == 5 and measured.mean_kld == 0.0
        assert "compared at the common 5" in measured.skipped[0]
        assert judge_quality(judged(ours, theirs)).state != DIFFER
    assert judge_quality(judged(reference, reference)).state == SAME_ANSWERS  # the same k: the same pass is same
    # The candidate asks the reference's k (up to the 20 every engine lists), never fewer.
    assert candidate_top_k(8, {"pass": {"top_k": 20, "texts": []}}) == 20
    assert candidate_top_k(20, {"pass": fewer}) == 20


def test_an_imported_reference_at_another_top_k_is_compared_at_the_common_k() -> None:
    imported = cut_to(fixture("llamacpp_pass_default.json"), 6)
    stored = {"recipe": "bf16", "pass": imported, "noise": None, "imported": {"from": "/x", "at": "t"}}
    candidate = fixture("llamacpp_pass_default.json")
    passed = judged(imported, candidate, stored)
    assert passed["against_reference"]["top_k"] == 6 and passed["against_reference"]["imported"] is True
    assert judge_quality(passed).state != DIFFER


def start_against(imported: dict[str, Any], passed: dict[str, Any]) -> dict[str, Any]:
    """One start of a recipe as the bench writes it, compared with the imported reference."""
    stored = {"recipe": "fp8", "pass": imported, "noise": None,
              "imported": {"from": "/x/fp8.json", "at": "2026-12-01T09:00Z", "checkpoint": "org/Model-FP8@abc"}}
    return {"quality": judged(imported, passed, stored)}


def test_an_imported_reference_of_another_precision_leaves_the_unchanged_start_recipe_not_differ() -> None:
    # The imported reference computes something else (here the real kv-q4 pass, 4x the tolerance from default, stands
    # in for another checkpoint's precision): every pass of the unchanged start recipe sits at that gap.
    imported = fixture("llamacpp_pass_kv_q4.json")
    start = [start_against(imported, fixture(name)) for name in ("llamacpp_pass_default.json",
                                                                 "llamacpp_pass_default_restart.json")]
    gaps = [result["quality"]["against_reference"]["mean_kld"] for result in start]
    assert all(gap > 2 * TOLERANCE for gap in gaps)  # an absolute tolerance would veto the start itself
    assert all(judge_quality(result["quality"]).state != DIFFER for result in start)  # one pass: never differ
    judged_start = judge_over_starts(start, baseline_starts=start)
    assert judged_start.state == SAME_ANSWERS, judged_start.line
    assert "beyond the start recipe's" in judged_start.line
    # Another recipe as close to the start as the start's own second start is the same; without the start's passes
    # the gap alone is not a claim either way.
    assert judge_over_starts(start[1:], baseline_starts=start).state == SAME_ANSWERS
    assert judge_over_starts(start).state == UNKNOWN


def test_relative_to_the_start_a_recipe_that_moved_further_differs() -> None:
    imported = fixture("llamacpp_pass_kv_q4.json")
    start = [start_against(imported, fixture(name)) for name in ("llamacpp_pass_default.json",
                                                                 "llamacpp_pass_default_restart.json")]
    # Built here, not measured: the default pass with its most likely token's probability halved everywhere.
    moved = copy.deepcopy(fixture("llamacpp_pass_default.json"))
    for text in moved["texts"]:
        for step in text["steps"]:
            step["top"][0][1] += math.log(0.5)
    judged_moved = judge_over_starts([start_against(imported, moved)] * 2, baseline_starts=start)
    assert judged_moved.state == DIFFER, judged_moved.line


def test_same_is_decided_on_the_intervals_top_within_the_calibrated_share_of_the_tolerance() -> None:
    base = {"tolerance": TOLERANCE, "top_k": 20, "rest_mass": 0.2, "noise": {"mean_kld": 0.0, "interval": [0, 0]}}
    assert kld_state({**base, "mean_kld": 0.004, "interval": [0.003, 0.005]})[0] == SAME_ANSWERS
    # A mean inside the tolerance whose interval reaches past 0.5x it: the truth may be past it.
    assert kld_state({**base, "mean_kld": 0.005, "interval": [0.003, 0.008]})[0] == UNKNOWN
    # The rest bucket past the calibrated range: no "same", whatever the figure.
    state, why = kld_state({**base, "rest_mass": MAX_REST_MASS[20] + 0.1, "mean_kld": 0.0, "interval": [0.0, 0.0]})
    assert state == UNKNOWN and "rest bucket" in why
    # "Differ" on the interval's low end, past the tolerance and the top of the A/A's interval.
    assert kld_state({**base, "mean_kld": 0.03, "interval": [0.02, 0.04]})[0] == DIFFER
    assert kld_state({**base, "mean_kld": 0.03, "interval": [0.008, 0.05]})[0] == UNKNOWN
    noisy = {**base, "noise": {"mean_kld": 0.015, "interval": [0.01, 0.025]}}
    assert kld_state({**noisy, "mean_kld": 0.03, "interval": [0.02, 0.04]})[0] == UNKNOWN


def test_the_interval_is_reproducible_and_covers_the_mean() -> None:
    reference = fixture("llamacpp_pass_default.json")
    quantized = compare_passes(reference, fixture("llamacpp_pass_kv_q4.json"))
    assert quantized.interval == compare_passes(reference, fixture("llamacpp_pass_kv_q4.json")).interval
    low, high = quantized.interval or (0.0, 0.0)
    assert quantized.mean_kld is not None and low < quantized.mean_kld < high
    assert quantized.rest_mass is not None and 0.0 < quantized.rest_mass < 1.0
    assert len(quantized.position_kld["eccl-1"]) == 32


def test_a_teacher_forced_text_is_scored_from_its_second_half() -> None:
    forced = copy.deepcopy(fixture("llamacpp_pass_default.json"))  # built here: its steps read as forced positions
    forced["method"] = "forced"
    for text in forced["texts"]:
        text["prompt_ids"] = list(range(len(text["steps"]) + 1))
    measured = compare_passes(forced, forced)
    assert measured.positions == 2 * (32 - 15)  # steps 15-31 of each 33-token prompt
    assert any("tokens 0-14 not scored (too little context)" in line for line in measured.skipped)
