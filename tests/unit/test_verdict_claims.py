"""What a comparison may claim (issue 49): "same" is same on every judged metric, an unjudgeable judged row makes it
"cannot tell", one bad start is set aside by the declared rule (rigforge/updates/robust.py) without ever making a
claim, and a loss of twice the tolerance stops a driver update. Hand-made start values for the rules; seeded
SYNTHETIC starts (tests/bench_support/synthetic.py) for the rates, 400 draws each (measurements/
verdict_calibration.py prints the whole table at 1,000)."""

from __future__ import annotations

import math

import pytest

from rigforge.profile.loader import load_profile
from rigforge.updates.robust import set_aside
from rigforge.updates.sizing import Spread, plan_starts, primary_tolerance
from rigforge.updates.verdict import BETTER, CANNOT_TELL, SAME, Question, judge, overall
from tests.bench_support.synthetic import DRIVER_UPDATE, TOURNAMENT, claim_rates

DRAWS = 400
STEADY = (30.0, 30.1, 29.9)
BAD = -math.log(0.6)  # one start 40 % slow


def verdict(*questions: Question) -> str:
    answers = judge(list(questions), 0.05)
    primary = next((index for index, question in enumerate(questions) if question.primary), None)
    return overall(answers, primary)[0]


def test_same_needs_every_judged_metric_same() -> None:
    primary = Question(STEADY, (30.05, 29.95, 30.0), True, 5.0, True)
    steady_other = Question((10.0, 10.05, 9.95), (10.0, 9.98, 10.03), False, 10.0)
    wide_other = Question((10.0, 12.0, 8.5), (12.0, 9.0, 11.5), False, 10.0)  # cannot tell on its own
    assert verdict(primary, steady_other) == SAME
    assert verdict(primary, wide_other) == CANNOT_TELL


def test_an_unjudgeable_judged_row_makes_cannot_tell_even_beside_a_better_primary() -> None:
    better = Question(STEADY, (36.0, 36.1, 35.9), True, 5.0, True)
    broken = Question((10.0, 10.1, 9.9), (10.0, math.nan, 9.9), False, 10.0)
    answers = judge([better, broken], 0.05)
    assert answers[0].verdict == BETTER and answers[1].refused
    assert overall(answers, 0) == (CANNOT_TELL, 1)


def test_one_bad_start_is_set_aside_said_and_never_makes_a_claim() -> None:
    slow_start = Question(STEADY, (30.05, 29.95, 18.0), True, 5.0, True)  # the after side's 3rd start 40 % slow
    answer = judge([slow_start], 0.05)[0]
    assert answer.verdict == SAME and answer.set_aside.startswith("after-start 3 of 3 set aside (-39.9 %")
    assert answer.set_aside in answer.why
    # +10 % on the two steady after-starts, the third 33 % slow: better without it, not with it: no claim
    resting = judge([Question(STEADY, (33.0, 33.1, 20.0), True, 5.0, True)], 0.05)[0]
    assert resting.verdict == CANNOT_TELL and "no claim rests on a start set aside" in resting.why
    # a wide side is not one bad start: nothing set aside
    assert set_aside([(30.0, 36.0, 24.0)], [(30.0, 30.1, 29.9)], [True]) == (None, None)
    assert judge([Question(STEADY, (30.05, 29.95, 18.0), True, 5.0, True)], 0.05, aligned=False)[0].set_aside == ""


@pytest.mark.parametrize("where", ["before", "after"])
def test_one_start_40_percent_slow_neither_claims_nor_forces_cannot_tell(where: str) -> None:
    sandbox = load_profile("sandbox")
    rates = claim_rates(sandbox, 0.02, 0.02, 0.0, DRAWS, seed=49, starts=6, bad=(BAD, where))
    assert rates.claimed <= 0.05 and rates.same >= 0.5, rates
    tournament = claim_rates(sandbox, 0.02, 0.02, 0.0, DRAWS // 2, seed=50, starts=3, design=TOURNAMENT,
                             bad=(BAD, "before"))
    assert tournament.claimed <= 0.05 and tournament.same >= 0.5, tournament


def test_same_stays_under_5_percent_when_another_judged_metric_moved_past_its_tolerance() -> None:
    # 2x-pix: decode at C=1 unchanged, every other judged number 15 % the bad way (past its 10 % tolerance)
    pix = load_profile("2x-pix")
    rates = claim_rates(pix, 0.02, 0.0, 0.0, DRAWS, seed=51, starts=3, design=DRIVER_UPDATE, others=-0.15)
    assert rates.same <= 0.05, rates


@pytest.mark.parametrize("offset", [0.02, 0.05])
def test_a_loss_of_twice_the_tolerance_stops_95_percent_of_driver_updates_at_the_planned_k(offset: float) -> None:
    sandbox = load_profile("sandbox")
    spread = math.sqrt(offset ** 2 + 0.02 ** 2 / sandbox.bench.repeats)
    k = plan_starts(sandbox, Spread(spread, "calibration")).starts
    loss = -2 * primary_tolerance(sandbox)
    rates = claim_rates(sandbox, 0.02, offset, loss, DRAWS, seed=52, starts=k, others=0.0)
    assert rates.stopped >= 0.95 and rates.better == 0.0 and rates.same <= 0.05, rates
