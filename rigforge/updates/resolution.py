"""What a comparison of k engine starts a side can resolve, said before anything is measured and after.

A comparison (rigforge.updates.comparison.compare) calls a speed loss ``worse`` only when the whole interval of
the change (Welch's t on the logs of the start values, rigforge.updates.significance, at the two-sided level
``alpha`` the claim is tested at) lies past the tolerance, and says ``same`` only when the change's 90 % interval
lies inside ± the tolerance (TOST, rigforge.updates.verdict.EQUIVALENCE_INTERVAL). With few starts and a wide
start-to-start spread neither can happen for a change of the size the owner cares about: the comparison then says
``cannot tell``, and this module says how far it could see. Power analysis at the tolerance, not at the change
that was observed (a post-hoc power says nothing the interval did not).

Both numbers are computed as the verdict decides, not by a textbook formula: the decision (the claim's interval at
level ``alpha``, TOST's 90 % interval, each with t quantiles of significance.t_quantile at the Welch-Satterthwaite
degrees of freedom the test computes from the sample spreads) averaged over 2,000 sample spreads drawn once with a
fixed seed (a sample variance of normal logs is the true one times chi-square / df); given the spreads the change
is normal, so that part is exact. The normal-theory size with t at 2k - 2 (Chow, Shao, Wang, Sample Size
Calculations in Clinical Research, 3.2) promises 80 % where the verdict delivers about 60 % at 3 starts a side: a
Welch interval's width is itself random, and at 2-4 degrees of freedom that matters. tests/unit/test_resolution.py
checks both numbers against ``judge`` by simulation.

- ``smallest_worse``: the smallest true loss (a fraction: 0.12 is after = 0.88 x before) called ``worse`` with
  chance ``power``.
- ``same_margin``: the narrowest ± tolerance (a fraction) inside which TOST says ``same`` with chance ``power``
  when nothing changed: the 90 % interval, change ± t(0.10, df) x standard error, inside ± m in log units, with
  m the mean of the verdict's two log margins, log1p(T) up and -log1p(-T) down, i.e. T = tanh(m).

Example::

    resolution(3, 3, spread=0.02, tolerance=0.05, alpha=0.025).describe()
    # '3 vs 3 starts at a start-to-start spread of 2.0 %: a loss of 13.2 % or more is called worse ...'
    starts_to_resolve(0.02, 0.05, 0.025)          # 5: starts a side for a loss of 2 x 5 % to be called worse
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from rigforge.updates.significance import t_quantile

__all__ = ["EQUIVALENCE_LEVEL", "MOST_STARTS", "Resolution", "resolution", "starts_to_decide", "starts_to_resolve"]

#: Two-sided level of TOST's interval: the 90 % interval (rigforge.updates.verdict.EQUIVALENCE_INTERVAL).
EQUIVALENCE_LEVEL = 0.10
#: Drawn spreads the chances are averaged over (the chance's own error is then under half a point).
NODES = 2000
#: More starts than this a side are not proposed: the spread, not the count, is then what to fix.
MOST_STARTS = 30


@dataclass(frozen=True)
class Resolution:
    """What k starts a side resolve at a spread; fractions, not percent (``inf``: nothing can be resolved).

    + smallest_worse: the smallest true loss called worse with chance ``power``
    + same_margin: the narrowest ± margin inside which "same" is said with chance ``power`` at no change
    """

    k_before: int
    k_after: int
    spread: float  # start-to-start standard deviation of log start values
    tolerance: float
    alpha: float
    power: float
    smallest_worse: float
    same_margin: float

    @property
    def resolves(self) -> bool:
        """Both a loss of twice the tolerance called worse and no change called same, each with ``power``."""
        return self.smallest_worse <= 2.0 * self.tolerance and self.same_margin <= self.tolerance

    def describe(self) -> str:
        """One line: ``3 vs 3 starts at a start-to-start spread of 2.0 %: a loss of 13.2 % or more is called
        worse, "same" needs a tolerance of ±6.3 % or wider (80 % power; tolerance 5 %)``."""
        where = f"{self.k_before} vs {self.k_after} starts at a start-to-start spread of {_percent(self.spread)}"
        if not math.isfinite(self.smallest_worse):
            return f"{where}: the start-to-start spread is unmeasured; at least 2 starts a side measure it"
        worse = f"a loss of {_percent(self.smallest_worse)} or more is called worse"
        same = f'"same" needs a tolerance of ±{_percent(self.same_margin)} or wider'
        return f"{where}: {worse}, {same} ({self.power * 100:g} % power; tolerance {self.tolerance * 100:g} %)"


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.1f} %" if math.isfinite(fraction) else "unmeasured"


def _down_margin(tolerance: float) -> float:
    """The tolerance of a drop in log units, as rigforge.updates.verdict judges a loss."""
    return -math.log1p(-tolerance) if tolerance < 1.0 else math.inf


def _normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


@functools.lru_cache(maxsize=256)
def _spreads(k_before: int, k_after: int) -> tuple[tuple[float, float], ...]:
    """Drawn sample spreads of the two sides, in units of the true spread: per node the standard error of the
    change and the Welch-Satterthwaite degrees of freedom the test computes from them (rounded as
    Welch.interval_percent rounds them). A sample variance of normal log start values is the true variance times
    chi-square / df; drawn with a fixed seed, so every call sees the same nodes and the numbers repeat."""
    draw = random.Random(f"resolution {k_before} {k_after}")
    nodes = []
    for _ in range(NODES):
        part_before = draw.gammavariate((k_before - 1) / 2.0, 2.0) / (k_before - 1) / k_before
        part_after = draw.gammavariate((k_after - 1) / 2.0, 2.0) / (k_after - 1) / k_after
        squared = part_before + part_after
        df = squared * squared / (part_before ** 2 / (k_before - 1) + part_after ** 2 / (k_after - 1))
        nodes.append((math.sqrt(squared), round(df, 2)))
    return tuple(nodes)


def _bisect(chance: Callable[[float], float], power: float, high: float) -> float:
    """The smallest x in [0, high] with ``chance(x) >= power`` (chance rising in x); inf if even high falls short."""
    if chance(high) < power:
        return math.inf
    low = 0.0
    for _ in range(30):
        middle = (low + high) / 2.0
        low, high = (low, middle) if chance(middle) >= power else (middle, high)
    return high


@functools.lru_cache(maxsize=1024)
def _worse_room(k_before: int, k_after: int, alpha: float, power: float) -> float:
    """How far past the tolerance (log units, in true spreads) a loss must lie to be called worse with ``power``:
    the chance that the interval's near end, change + t(alpha, df) x standard error, clears the margin, averaged
    over the drawn spreads (given them the change is normal, so that part is exact)."""
    spread_of_change = math.sqrt(1.0 / k_before + 1.0 / k_after)
    reach = [t_quantile(alpha, df) * error for error, df in _spreads(k_before, k_after)]

    def chance(room: float) -> float:
        return math.fsum(_normal_cdf((room - half) / spread_of_change) for half in reach) / len(reach)

    return _bisect(chance, power, 50.0)


@functools.lru_cache(maxsize=1024)
def _same_room(k_before: int, k_after: int, power: float) -> float:
    """The narrowest ± margin (log units, in true spreads) holding the 90 % interval with chance ``power`` at no
    change, averaged over the drawn spreads as ``_worse_room`` is."""
    spread_of_change = math.sqrt(1.0 / k_before + 1.0 / k_after)
    halves = [t_quantile(EQUIVALENCE_LEVEL, df) * error for error, df in _spreads(k_before, k_after)]

    def chance(margin: float) -> float:
        inside = (2.0 * _normal_cdf((margin - half) / spread_of_change) - 1.0 for half in halves)
        return math.fsum(max(0.0, value) for value in inside) / len(halves)

    return _bisect(chance, power, 50.0)


def resolution(k_before: int, k_after: int, spread: float, tolerance: float, alpha: float,
               power: float = 0.8) -> Resolution:
    """What a comparison of ``k_before`` against ``k_after`` engine starts can resolve.

    + k_before / k_after: engine starts a side
    + spread: the start-to-start standard deviation of log start values (e.g. 0.023; Welch.sd of a past run)
    + tolerance: the judged metric's tolerance as a fraction (0.05 for 5 %)
    + alpha: the two-sided level the claim is tested at (the primary's share of the false-claim rate at that
      look: 0.025 for one look at the default 0.05 with other judged metrics)
    + power: the chance of the verdict the numbers are sized for

    >>> r = resolution(3, 3, 0.02, 0.05, 0.025)
    >>> round(r.smallest_worse, 3), round(r.same_margin, 3)
    (0.132, 0.063)
    >>> resolution(1, 3, 0.02, 0.05, 0.025).smallest_worse
    inf
    """
    if min(k_before, k_after) < 2 or not math.isfinite(spread) or spread < 0.0:
        return Resolution(k_before, k_after, spread, tolerance, alpha, power, math.inf, math.inf)
    if spread == 0.0:
        return Resolution(k_before, k_after, spread, tolerance, alpha, power, tolerance, 0.0)
    worse = _down_margin(tolerance) + _worse_room(k_before, k_after, alpha, power) * spread
    same = math.tanh(_same_room(k_before, k_after, power) * spread)
    return Resolution(k_before, k_after, spread, tolerance, alpha, power, -math.expm1(-worse), same)


def starts_to_resolve(spread: float, tolerance: float, alpha: float, power: float = 0.8, most: int = MOST_STARTS,
                      loss: float | None = None, same: bool = False) -> int | None:
    """Engine starts a side for the comparison to call a loss of ``loss`` (default: twice the tolerance) worse
    with chance ``power``; None when more than ``most`` would be needed. Sized at the tolerance, never at an
    observed change. A loss of exactly the tolerance cannot be called worse at any count (a claim needs the
    whole interval past the tolerance), hence the default: one tolerance past it.

    + spread: the start-to-start standard deviation of log start values
    + tolerance: the primary's tolerance as a fraction
    + alpha: the two-sided level the claim is tested at
    + power: the chance of calling it worse
    + most: the most starts a side proposed
    + loss: the true loss (a fraction) to resolve; None: 2 x tolerance
    + same: also say "same" inside the tolerance with chance ``power`` when nothing changed (``resolves``)

    >>> starts_to_resolve(0.02, 0.05, 0.025), starts_to_resolve(0.02, 0.05, 0.025, power=0.95)
    (5, 6)
    >>> starts_to_resolve(0.20, 0.05, 0.025) is None, starts_to_resolve(0.02, 0.5, 0.025)
    (True, 2)
    """
    # A loss of 100 % or more has no log (after would be 0): a tolerance of 50 % or more sizes for a 99 % loss.
    target = min(2.0 * tolerance if loss is None else loss, 0.99)
    if not math.isfinite(spread) or spread < 0.0:
        return None
    room = -math.log1p(-target) - _down_margin(tolerance)  # log units past the tolerance a claim may take
    for starts in range(2, most + 1):
        if spread == 0.0:
            return starts
        if _worse_room(starts, starts, alpha, power) * spread <= room and (
                not same or math.tanh(_same_room(starts, starts, power) * spread) <= tolerance):
            return starts
    return None


def starts_to_decide(change_percent: float, start_spread_percent: float, tolerance_percent: float,
                     claim_rate: float, power: float = 0.8) -> int | None:
    """Engine starts a side that give a verdict with chance ``power`` if the true change and the start-to-start
    spread are the ones given; None when no count up to MOST_STARTS would. Sized at a given change (the older
    post-hoc use: at the change measured); the verdicts now size at the tolerance (``starts_to_resolve``).

    Past the tolerance the goal is a claim: the ``1 - claim_rate`` interval past the tolerance; inside it, ``same``:
    the 90 % interval inside ± the tolerance. The normal-theory sample size with t quantiles at 2n - 2 degrees of
    freedom (at a change of exactly zero, ``same`` needs both one-sided tests to pass: the power's quantile is
    taken at half its miss rate; S.-C. Chow, J. Shao, H. Wang, Sample Size Calculations in Clinical Research, 3.2).

    + change_percent: the change to size for (e.g. the one measured), signed
    + start_spread_percent: standard deviation of one start's value, in % (e.g. 2.3)
    + tolerance_percent: the profile's tolerance for the metric
    + claim_rate: the false-claim rate the claim is tested at (the primary's share: 0.025 by default)
    + power: the chance of a verdict the count is sized for

    >>> starts_to_decide(20.0, 2.3, 5.0, 0.025), starts_to_decide(0.0, 2.0, 5.0, 0.025)
    (3, 4)
    >>> starts_to_decide(6.0, 4.0, 5.0, 0.025) is None      # 1 % past the tolerance at 4 % spread: > 30 starts
    True
    """
    change, sd = math.log1p(change_percent / 100.0), math.log1p(start_spread_percent / 100.0)
    up, down = math.log1p(tolerance_percent / 100.0), _down_margin(tolerance_percent / 100.0)
    margin = up if change >= 0 else down
    if abs(change) > margin:
        room, level, miss = abs(change) - margin, claim_rate, 1.0 - power
    else:
        room, level = min(up - change, down + change), EQUIVALENCE_LEVEL
        miss = (1.0 - power) / 2.0 if change == 0.0 else 1.0 - power
    if sd == 0.0:
        return 2
    for starts in range(2, MOST_STARTS + 1):
        df = 2 * starts - 2
        if (t_quantile(level, df) + t_quantile(2.0 * miss, df)) * sd * math.sqrt(2.0 / starts) <= room:
            return starts
    return None
