"""Is a change between two small sets of engine starts real? Welch's t-test on log values, and Holm's correction.

Pure Python (no scipy on the rigs or the controller). What is tested is one value per engine start (the
geometric mean of the repeats measured inside it, rigforge.updates.starts): repeats back to back inside one
start share whatever that start got (an autotuner's choice, a clock, a neighbour's load), so only the
start-to-start spread says how far another start would land. Why this test, for 2-5 starts a side:

- A rank test cannot decide with so few starts: an exact Mann-Whitney U (the one Google Benchmark's
  ``tools/compare.py`` uses, warning below 9 repetitions) or permutation test of 2 against 2 has 6 orderings,
  so its smallest one-sided p is 1/6; 3 against 3 gives 1/20. No correction for more than one metric leaves
  room for either ever to claim anything.
- Welch's unequal-variance t-test (B. L. Welch, "The generalization of Student's problem when several
  different population variances are involved", Biometrika 34, 1947) works from two values a side and assumes
  no equal noise before and after. Its p-value is an approximation (the Welch-Satterthwaite degrees of
  freedom), not exact even for normal samples: with 6 values against 2 and the small side 3x noisier its real
  false-positive rate is about 8 % at a nominal 2.5 %. pyperf's ``compare_to`` is not the anchor for it: it runs
  Student's pooled-variance t-test on the raw values at a 95 % table level. Speeds are ratios, so this test runs
  on log values: a change is a factor, the same whichever side is the baseline.
- What it cannot do: with 2 values a side its degrees of freedom fall to about 1-2, so only a change many
  times its spread is significant, and the spread itself is a guess from two numbers.

``Welch.p_beyond`` tests a change *beyond a margin* (the tolerance) rather than beyond zero: its p is below a
level exactly when the two-sided interval at that level lies wholly past the margin, so a claim is a claim
about the whole interval (criterion.rs likewise calls a change only when its interval clears a fixed noise
threshold, 1 % by default).

Holm's step-down procedure (S. Holm, "A simple sequentially rejective multiple test procedure", Scand. J.
Statist. 6, 1979) keeps the chance of any false claim among m tests at alpha without assuming they are
independent (the metrics of one cell are not). A p-value that is not a finite number is never significant.

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
    + sd: the pooled standard deviation of one value (one engine start's; log units, ~ relative noise)
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

    def p_beyond(self, margin: float) -> float:
        """Two-sided-style p that the change lies within ``±margin`` (log units), against beyond it on the side
        observed: below ``level_p`` exactly when ``interval_percent(level_p)`` lies wholly past the margin.

        >>> far, near = Welch(0.2, 0.05, 4.0, 0.06, (3, 3)), Welch(0.02, 0.05, 4.0, 0.06, (3, 3))
        >>> round(far.p_beyond(0.05), 4), near.p_beyond(0.05)
        (0.0399, 1.0)
        """
        beyond = abs(self.log_change) - margin
        if beyond <= 0.0:
            return 1.0
        if self.standard_error == 0.0:
            return 0.0
        return t_two_sided_p(beyond / self.standard_error, self.df)

    def interval_percent(self, level_p: float) -> tuple[float, float]:
        """The (1 - level_p) confidence interval of the change, in % of before."""
        # df to 0.01: the critical value moves by far less than the interval's own digits, and repeats hit the cache.
        half = t_quantile(level_p, round(self.df, 2)) * self.standard_error
        return _percent(self.log_change - half), _percent(self.log_change + half)


def _percent(log_change: float) -> float:
    """A log change in %; past what a float holds (a tiny level at 1-2 degrees of freedom), infinite."""
    return math.expm1(log_change) * 100.0 if log_change < 700.0 else math.inf


def _variance(values: Sequence[float]) -> float:
    """The sample variance in plain floats (statistics.variance works in exact fractions: 20x slower)."""
    if len(values) < 2:
        return 0.0
    mean = math.fsum(values) / len(values)
    return math.fsum((value - mean) ** 2 for value in values) / (len(values) - 1)


def welch_log(before: Sequence[float], after: Sequence[float]) -> Welch | None:
    """Welch's test on log values; None unless both sides have two or more positive, finite values.

    + before: the baseline's values, one per engine start (e.g. tok/s)
    + after: the values to judge
    """
    values = (*before, *after)
    if len(before) < 2 or len(after) < 2 or not all(math.isfinite(v) and v > 0 for v in values):
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
    """Which of the tests are significant with the family's chance of any false one kept at ``alpha``; a p that
    is not a finite number in [0, 1] counts as 1 (never significant, still one of the m tests), so it cannot
    reorder the others (a NaN compares false with everything and would).

    >>> holm([0.01, 0.04, 0.03], 0.05), holm([0.001, 0.2], 0.05), holm([float("nan"), 0.001], 0.05)
    ([True, False, False], [True, False], [False, True])
    """
    checked = [p if math.isfinite(p) and 0.0 <= p <= 1.0 else 1.0 for p in p_values]
    order = sorted(range(len(checked)), key=lambda index: checked[index])
    significant = [False] * len(checked)
    for rank, index in enumerate(order):
        if checked[index] > alpha / (len(checked) - rank):
            break
        significant[index] = True
    return significant
