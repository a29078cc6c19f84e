"""The resolution a comparison of k starts a side has, checked against the verdict's own decision: seeded
SYNTHETIC start values (normal logs, one per start) judged by rigforge.updates.verdict.judge exactly as compare
judges the primary. A loss of ``smallest_worse`` is called worse in about ``power`` of the draws, no change at
a tolerance of ``same_margin`` is called same in about ``power``; starts_to_resolve is the first count whose
resolution reaches twice the tolerance."""

from __future__ import annotations

import math
import random

import pytest

from rigforge.updates.resolution import resolution, starts_to_resolve
from rigforge.updates.verdict import SAME, WORSE, Question, judge

DRAWS = 1500


def verdict_share(k: int, spread: float, loss: float, tolerance: float, verdict: str, seed: int) -> float:
    draw = random.Random(seed)
    hits = 0
    for _ in range(DRAWS):
        before = tuple(math.exp(draw.gauss(0.0, spread)) for _ in range(k))
        after = tuple((1.0 - loss) * math.exp(draw.gauss(0.0, spread)) for _ in range(k))
        hits += judge([Question(before, after, True, tolerance * 100.0, True)], 0.025)[0].verdict == verdict
    return hits / DRAWS


@pytest.mark.parametrize(("k", "spread"), [(2, 0.02), (3, 0.02), (3, 0.05), (6, 0.035)])
def test_the_resolution_is_what_the_verdict_delivers(k: int, spread: float) -> None:
    found = resolution(k, k, spread, 0.05, 0.025)
    # 1,500 draws: a share of 80 % has a standard error of 1 point
    assert verdict_share(k, spread, found.smallest_worse, 0.05, WORSE, seed=k) == pytest.approx(0.80, abs=0.04)
    assert verdict_share(k, spread, 0.0, found.same_margin, SAME, seed=10 + k) == pytest.approx(0.80, abs=0.04)


def test_more_starts_and_less_spread_resolve_finer() -> None:
    worse = [resolution(k, k, 0.03, 0.05, 0.025).smallest_worse for k in range(2, 9)]
    same = [resolution(k, k, 0.03, 0.05, 0.025).same_margin for k in range(2, 9)]
    assert worse == sorted(worse, reverse=True) and same == sorted(same, reverse=True)
    assert resolution(3, 3, 0.01, 0.05, 0.025).smallest_worse < resolution(3, 3, 0.04, 0.05, 0.025).smallest_worse
    # a loss is only ever called past the tolerance; more power asks for a larger one
    assert all(value > 0.05 for value in worse)
    assert resolution(3, 3, 0.03, 0.05, 0.025, power=0.95).smallest_worse > worse[1]
    assert resolution(3, 5, 0.03, 0.05, 0.025).smallest_worse < worse[1]


def test_an_unmeasured_spread_resolves_nothing_and_says_so() -> None:
    for unmeasured in (resolution(1, 3, 0.02, 0.05, 0.025), resolution(3, 3, math.nan, 0.05, 0.025)):
        assert math.isinf(unmeasured.smallest_worse) and not unmeasured.resolves
        assert "unmeasured" in unmeasured.describe()
    line = resolution(3, 3, 0.02, 0.05, 0.025).describe()
    assert line.startswith("3 vs 3 starts at a start-to-start spread of 2.0 %: a loss of 13.2 % or more")


def test_starts_to_resolve_is_the_first_count_that_reaches_twice_the_tolerance() -> None:
    for spread in (0.01, 0.02, 0.05):
        starts = starts_to_resolve(spread, 0.05, 0.025, power=0.95)
        assert starts is not None
        assert resolution(starts, starts, spread, 0.05, 0.025, 0.95).smallest_worse <= 0.10
        assert starts == 2 or resolution(starts - 1, starts - 1, spread, 0.05, 0.025, 0.95).smallest_worse > 0.10
    assert starts_to_resolve(0.20, 0.05, 0.025) is None  # more than 30 starts a side: fix the spread instead
    assert starts_to_resolve(0.02, 0.05, 0.025, loss=0.40) == 2  # 2 a side resolve 35 % at 2 %
