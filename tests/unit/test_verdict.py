"""Verdicts that survive an A/A test: seeded synthetic samples (tests/bench_support/synthetic.py, labelled
SYNTHETIC: log-normal repeats) at the shipped profiles' own cells, judged metrics and repeats, 1,000 draws each.

Identical distributions must give no better/worse verdict in at least 95 % of the draws; a 20 % change at
GPU-like noise (2 %) must be found in at least 95 %. measurements/verdict_calibration.py prints the rates at
5/10/20/40 % and at sandbox-like noise (30 %) for docs/bench.md. The significance test's numbers are checked
against published t-table values.
"""

from __future__ import annotations

import math

import pytest

from rigforge.profile.loader import load_profile
from rigforge.updates.significance import holm, t_quantile, t_two_sided_p, welch_log
from rigforge.updates.verdict import BETTER, CANNOT_TELL, SAME, WORSE, Question, judge, overall
from tests.bench_support.synthetic import claim_rates, profile_questions, synthetic_result

DRAWS = 1000


@pytest.mark.parametrize(("profile", "noise", "start_again"), [
    ("sandbox", 0.30, True),           # the sandbox's own noise on a loaded 2-core box, a tournament
    ("4x-threadripper", 0.30, False),  # the most judged metrics (10 cells x 3), a driver update, very noisy
    ("2x-pix", 0.02, True),            # GPU-like noise, 12 cells
])
def test_identical_distributions_are_never_called_better_or_worse_in_95_percent(
        profile: str, noise: float, start_again: bool) -> None:
    rates = claim_rates(load_profile(profile), noise=noise, shift=0.0, draws=DRAWS, seed=33, start_again=start_again)
    assert rates.claimed <= 0.05, rates


@pytest.mark.parametrize("profile", ["4x-threadripper", "8x-turin"])
def test_a_20_percent_change_at_gpu_like_noise_is_found_in_95_percent(profile: str) -> None:
    rates = claim_rates(load_profile(profile), noise=0.02, shift=0.20, draws=DRAWS, seed=34, start_again=False)
    assert rates.better >= 0.95 and rates.worse == 0.0, rates


def test_the_t_distribution_matches_published_tables() -> None:
    # Two-sided 5 % critical values (any t table): df 1: 12.706, 2: 4.303, 4: 2.776, 30: 2.042.
    for df, critical in ((1, 12.706), (2, 4.303), (4, 2.776), (30, 2.042)):
        assert t_quantile(0.05, df) == pytest.approx(critical, abs=1e-3)
        assert t_two_sided_p(critical, df) == pytest.approx(0.05, abs=1e-4)


def test_welch_on_logs_is_the_same_either_way_round() -> None:
    forward, backward = welch_log([30.0, 31.0, 29.5], [20.0, 21.0]), welch_log([20.0, 21.0], [30.0, 31.0, 29.5])
    assert forward is not None and backward is not None
    assert forward.p_value == pytest.approx(backward.p_value)
    assert math.log1p(forward.change_percent / 100) == pytest.approx(-math.log1p(backward.change_percent / 100))
    assert welch_log([30.0], [20.0, 21.0]) is None  # one repeat: no spread, no test


def test_holm_rejects_step_by_step() -> None:
    assert holm([0.001, 0.012, 0.04], 0.05) == [True, True, True]  # 0.001<0.05/3, 0.012<0.05/2, 0.04<0.05
    assert holm([0.001, 0.03, 0.04], 0.05) == [True, False, False]


def question(before: tuple[float, ...], after: tuple[float, ...], tolerance: float = 5.0, primary: bool = True,
             drift: float | None = None) -> Question:
    return Question(before, after, True, tolerance, primary, drift)


def test_only_the_primary_makes_better_and_any_judged_metric_vetoes() -> None:
    faster = question((30.0, 30.2, 29.9), (40.0, 40.3, 39.8), primary=False)
    steady = question((30.0, 30.2, 29.9), (30.1, 29.9, 30.0))
    answers = judge([steady, faster], 0.05)
    assert answers[1].verdict == BETTER and overall(answers, 0) == (SAME, 0)
    slower = question((30.0, 30.2, 29.9), (20.0, 20.3, 19.8), primary=False)
    answers = judge([steady, slower], 0.05)
    assert overall(answers, 0) == (WORSE, 1)


def test_a_change_inside_the_tolerance_or_the_drift_is_no_claim() -> None:
    small = judge([question((30.0, 30.1, 29.9), (31.0, 31.1, 30.9), tolerance=5.0)], 0.05)[0]
    assert small.verdict == SAME and "within ±5 %" in small.why
    drifted = judge([question((30.0, 30.1, 29.9, 36.0), (37.0, 37.1, 36.9), tolerance=5.0, drift=20.0)], 0.05)[0]
    assert drifted.verdict == CANNOT_TELL and "drifted +20.0 %" in drifted.why


def test_cannot_tell_says_the_noise_and_how_many_repeats_would_decide() -> None:
    noisy = judge([question((30.0, 24.0), (30.5, 24.5), tolerance=5.0)], 0.05)[0]
    assert noisy.verdict == CANNOT_TELL and noisy.noise_percent is not None and noisy.noise_percent > 20
    assert "repeats a side" in noisy.why
    inside = judge([question((30.0, 24.0), (50.0, 40.0), tolerance=5.0)], 0.05)[0]
    assert inside.verdict in (CANNOT_TELL, BETTER)


def test_the_synthetic_questions_are_the_ones_compare_asks() -> None:
    """The calibration above judges questions built straight from the profile (fast); ``compare`` on whole
    synthetic results asks the same ones: same count, one primary, the same tolerances."""
    import random

    from rigforge.updates.comparison import RegressionPolicy, compare

    profile = load_profile("2x-pix")
    rng = random.Random(1)
    comparison = compare(synthetic_result(profile, rng, 0.02), synthetic_result(profile, rng, 0.02),
                         RegressionPolicy.from_profile(profile), [synthetic_result(profile, rng, 0.02)])
    judged = [row for row in comparison.cells if row.verdict]
    questions = profile_questions(profile, rng, 0.02, 0.0, True)
    assert len(judged) == len(questions) and sum(row.primary for row in judged) == 1 == sum(
        question.primary for question in questions)
    assert sorted(row.tolerance_percent for row in judged) == sorted(q.tolerance_percent for q in questions)
    assert all(len(row.before_repeats) == 2 * profile.bench.repeats for row in judged)
