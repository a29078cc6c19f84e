"""Is a change between two small sets of repeats real? Welch's t-test on log values, and Holm's correction.

Pure Python (no scipy on the rigs or the controller). Why this test, for 2-5 repeats per side:

- A rank test cannot decide with so few repeats: an exact Mann-Whitney U (the one Google Benchmark's
  ``tools/compare.py`` uses, warning below 9 repetitions) or permutation test of 2 against 2 repeats has 6
  orderings, so its smallest one-sided p is 1/6; 3 against 3 gives 1/20. No correction for more than one
  metric leaves room for either ever to claim anything.
- Welch's unequal-variance t-test (B. L. Welch, "The generalization of Student's problem when several
  different population variances are involved", Biometrika 34, 1947; the test pyperf's ``compare_to`` uses
  for "Significant"/"Not significant") works from two repeats a side, assumes no equal noise before and after,
  and its p-values are exact for normal samples. Speeds are ratios, so it runs on log values: a change is a
  factor, the same whichever side is the baseline, and a few slow repeats do not make the noise lopsided.
- What it cannot do: with 2 repeats a side its degrees of freedom fall to about 1-2, so only a change many
  times its spread is significant, and the spread itself is a guess from two numbers. Repeats measured back to
  back share whatever the machine did in those seconds, so their spread understates the difference between two
  runs minutes apart: that is why the recipe tournament measures its start twice and pools both runs, and why a
  verdict also needs the change to pass the measured drift (rigforge.updates.verdict).

Holm's step-down procedure (S. Holm, "A simple sequentially rejective multiple test procedure", Scand. J.
Statist. 6, 1979) keeps the chance of any false claim among m tests at alpha without assuming they are
independent (the metrics of one cell are not).

Example::

    test = welch_log([30.1, 30.6], [18.2, 18.9])
    test.p_value < 0.01, round(test.change_percent)     # (True, -39)
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Welch", "holm", "t_quantile", "t_two_sided_p", "welch_log"]


def _continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for numerator in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                          -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _continued_fraction(a, b, x) / a
    return 1.0 - front * _continued_fraction(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom.

    >>> round(t_two_sided_p(2.776, 4), 3), round(t_two_sided_p(12.706, 1), 3)
    (0.05, 0.05)
    """
    if math.isinf(t):
        return 0.0
    return incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def _t_density(t: float, df: float) -> float:
    return math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
                    - (df + 1) / 2 * math.log1p(t * t / df))


@functools.lru_cache(maxsize=4096)  # verdict.repeats_to_decide asks for the same (p, whole df) many times
def t_quantile(two_sided_p: float, df: float) -> float:
    """The t with ``t_two_sided_p(t, df) == two_sided_p`` (Newton's method on log t, bisection as a fallback).

    >>> round(t_quantile(0.05, 4), 2), round(t_quantile(0.05, 1000), 2), round(t_quantile(0.05, 1), 2)
    (2.78, 1.96, 12.71)
    """
    log_t = math.log(2.0)
    for _ in range(50):
        t = math.exp(log_t)
        error = t_two_sided_p(t, df) - two_sided_p
        if abs(error) < 1e-12 * two_sided_p:
            return t
        step = error / (2.0 * _t_density(t, df) * t)  # d p / d log t = -2 f(t) t
        log_t += max(-1.0, min(1.0, step))
    low, high = 0.0, math.exp(log_t) * 2.0 + 1.0
    while t_two_sided_p(high, df) > two_sided_p:
        high *= 2.0
    while high - low > 1e-9 * high:
        middle = (low + high) / 2.0
        low, high = (middle, high) if t_two_sided_p(middle, df) > two_sided_p else (low, middle)
    return (low + high) / 2.0


@dataclass(frozen=True)
class Welch:
    """Welch's t-test of after against before, on natural logs of the values.

    + log_change: mean(log after) - mean(log before)
    + standard_error: of that difference
    + df: Welch-Satterthwaite degrees of freedom
    + sd: the pooled standard deviation of one repeat (log units, ~ relative noise)
    """

    log_change: float
    standard_error: float
    df: float
    sd: float
    repeats: tuple[int, int]

    @property
    def change_percent(self) -> float:
        """The change as a percentage of before (ratio of geometric means)."""
        return math.expm1(self.log_change) * 100.0

    @property
    def p_value(self) -> float:
        """Two-sided: the chance of a change this large or larger if nothing changed."""
        if self.standard_error == 0.0:
            return 1.0 if self.log_change == 0.0 else 0.0
        return t_two_sided_p(self.log_change / self.standard_error, self.df)

    def interval_percent(self, level_p: float) -> tuple[float, float]:
        """The (1 - level_p) confidence interval of the change, in % of before."""
        # df to 0.01: the critical value moves by far less than the interval's own digits, and repeats hit the cache.
        half = t_quantile(level_p, round(self.df, 2)) * self.standard_error
        return math.expm1(self.log_change - half) * 100.0, math.expm1(self.log_change + half) * 100.0


def _variance(values: Sequence[float]) -> float:
    """The sample variance in plain floats (statistics.variance works in exact fractions: 20x slower)."""
    if len(values) < 2:
        return 0.0
    mean = math.fsum(values) / len(values)
    return math.fsum((value - mean) ** 2 for value in values) / (len(values) - 1)


def welch_log(before: Sequence[float], after: Sequence[float]) -> Welch | None:
    """Welch's test on log values; None unless both sides have two or more positive values.

    + before: the baseline's repeats (e.g. tok/s of each repeat)
    + after: the repeats to judge
    """
    if len(before) < 2 or len(after) < 2 or min(*before, *after) <= 0:
        return None
    logs_before, logs_after = [math.log(v) for v in before], [math.log(v) for v in after]
    n1, n2 = len(logs_before), len(logs_after)
    part1, part2 = _variance(logs_before) / n1, _variance(logs_after) / n2
    change = statistics.fmean(logs_after) - statistics.fmean(logs_before)
    squared = part1 + part2
    if squared == 0.0:
        df = float(n1 + n2 - 2)
    else:
        df = squared * squared / (part1 * part1 / (n1 - 1) + part2 * part2 / (n2 - 1))
    pooled = ((n1 - 1) * _variance(logs_before) + (n2 - 1) * _variance(logs_after)) / (n1 + n2 - 2)
    return Welch(change, math.sqrt(squared), df, math.sqrt(pooled), (n1, n2))


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Which of the tests are significant with the family's chance of any false one kept at ``alpha``.

    >>> holm([0.01, 0.04, 0.03], 0.05), holm([0.001, 0.2], 0.05)
    ([True, False, False], [True, False])
    """
    order = sorted(range(len(p_values)), key=lambda index: p_values[index])
    significant = [False] * len(p_values)
    for rank, index in enumerate(order):
        if p_values[index] > alpha / (len(p_values) - rank):
            break
        significant[index] = True
    return significant
