"""How many engine starts a measured change takes (a driver update, an engine build change), and what they resolve.

Before anything is measured: the primary metric's start-to-start **spread** is the one the rig's last measured
change measured (``UpdateRecord.spread``, rigforge/updates/record.py ``last_spread``), or, when none has, the
profile's ``driver_update.assumed_spread_percent`` (said as assumed). From it, k starts a side: the fewest, at least
``bench.verdicts.starts`` (the floor: the published 3-restart protocol), whose resolution (rigforge.updates.
resolution) resolves the primary's tolerance — a loss of twice it called worse and no change called "same", each
with 80 % power — and that ``driver_update.starts_budget_s`` affords for both sides (each side's first start the
full bench, the others the judged cells: rigforge/bench_runs/starts.py). When the budget stops k short, the plan
says so and what k does resolve: a change that cannot be told at the tolerance then stops the rollout (or goes on
by the owner's ``on_cannot_tell=continue``), it never passes as "same".

After the comparison the record says the resolution again at the spread the starts measured.

Example::

    plan = plan_starts(load_profile("sandbox"), Spread(0.06, "assumed"))
    plan.starts, plan.needed          # (..., 26): 26 starts a side would resolve 5 % at a 6 % spread
    print(plan.words())               # "resolution: 8 vs 8 starts at a start-to-start spread of 6.0 % ..."
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from rigforge.bench_runs.starts import minutes, side_seconds
from rigforge.profile import Profile
from rigforge.updates.comparison import Comparison
from rigforge.updates.policy import RegressionPolicy
from rigforge.updates.resolution import MOST_STARTS, Resolution, resolution, starts_to_resolve
from rigforge.updates.starts import METRICS

__all__ = ["Spread", "StartsPlan", "assumed_spread", "plan_line", "plan_starts", "pooled_spread", "primary_alpha",
           "primary_spread", "primary_tolerance", "resolution_at", "resolution_words", "resolving_starts"]


@dataclass(frozen=True)
class Spread:
    """The primary's start-to-start spread (standard deviation of log start values) and where it comes from."""

    value: float
    source: str  # "measured in the driver update of 20261201T...", "assumed (driver_update.assumed_spread_percent)"


@dataclass(frozen=True)
class StartsPlan:
    """k starts a side for a measured change, chosen before anything is measured.

    + starts: k, engine starts a side
    + spread: the spread k was chosen at
    + resolution: what k vs k starts resolve at that spread
    + needed: the fewest starts a side that resolve the tolerance at that spread; None: more than MOST_STARTS
    + seconds: about how long both sides' starts take
    + capped: the budget (driver_update.starts_budget_s) stopped k before it resolved the tolerance
    """

    starts: int
    spread: Spread
    resolution: Resolution
    needed: int | None
    seconds: float
    capped: bool

    def words(self) -> str:
        """``resolution: 3 vs 3 starts at ... (the spread measured in ...); 26 starts a side would resolve it ...``."""
        needed = (f"{self.needed} starts a side resolve it" if self.needed is not None
                  else f"more than {MOST_STARTS} starts a side would be needed to resolve it")
        if self.capped:
            needed += (", more than driver_update.starts_budget_s affords: an unchanged side will likely read "
                       "\"cannot tell\", which stops the rollout")
        return f"resolution: {self.resolution.describe()}, spread {self.spread.source}; {needed}"


def primary_tolerance(profile: Profile) -> float:
    """The primary metric's tolerance in its cell, as a fraction (the profile validates that a rule names it)."""
    primary = profile.bench.primary
    tolerance = RegressionPolicy.from_profile(profile).tolerance(primary.metric, primary.concurrency,
                                                                 primary.input_tokens)
    return (tolerance or 0.0) / 100.0


def primary_alpha(profile: Profile) -> float:
    """The two-sided level the primary's claim is tested at: half the false-claim rate when other judged metrics
    share the rest (as rigforge.updates.verdict.judge splits it), else all of it."""
    bench, policy = profile.bench, RegressionPolicy.from_profile(profile)
    primary = (bench.primary.metric, bench.primary.concurrency, bench.primary.input_tokens)
    grids = [(bench.concurrency, bench.input_tokens), *((cells.concurrency, cells.input_tokens)
                                                        for cells in bench.extra_cells)]
    others = any(policy.tolerance(metric.name, c, n) is not None and (metric.name, c, n) != primary
                 for levels, lengths in grids for c in levels for n in lengths for metric in METRICS)
    return bench.verdicts.false_claim_rate / 2.0 if others else bench.verdicts.false_claim_rate


def assumed_spread(profile: Profile) -> Spread:
    """The profile's stated spread, for a rig whose changes have measured none yet."""
    percent = profile.driver_update.assumed_spread_percent
    # A relative spread of a few % is its log spread to within a few % of itself.
    return Spread(percent / 100.0, f"assumed: driver_update.assumed_spread_percent {percent:g} %")


@lru_cache(maxsize=256)
def _resolution(k_before: int, k_after: int, spread: float, tolerance: float, alpha: float) -> Resolution:
    return resolution(k_before, k_after, spread, tolerance, alpha)


def resolution_at(profile: Profile, k_before: int, k_after: int, spread: float) -> Resolution:
    """What ``k_before`` vs ``k_after`` starts resolve at ``spread`` for the profile's primary."""
    return _resolution(k_before, k_after, round(spread, 6), primary_tolerance(profile), primary_alpha(profile))


def resolving_starts(profile: Profile, spread: float) -> int | None:
    """The fewest starts a side (2..MOST_STARTS) whose resolution resolves the primary's tolerance at ``spread``
    (``Resolution.resolves``); None: none do."""
    tolerance = primary_tolerance(profile)
    # Twice a tolerance of 50 % or more is a loss of everything: size for 99 % then (a loss of 100 % has no log).
    return starts_to_resolve(spread, tolerance, primary_alpha(profile), loss=min(2.0 * tolerance, 0.99), same=True)


def plan_starts(profile: Profile, spread: Spread) -> StartsPlan:
    """k starts a side: the fewest >= ``bench.verdicts.starts`` that resolve the tolerance at ``spread``, as many as
    ``driver_update.starts_budget_s`` affords for both sides, never fewer than ``bench.verdicts.starts``.

    + profile: the rig's profile (its primary, tolerance, false-claim rate, bench and budget)
    + spread: the spread to size for (``last_spread``, else ``assumed_spread``)
    """
    floor = profile.bench.verdicts.starts
    needed = resolving_starts(profile, spread.value)
    wanted = max(floor, needed if needed is not None else MOST_STARTS)
    budget = profile.driver_update.starts_budget_s
    affordable = max((k for k in range(floor, wanted + 1) if 2 * side_seconds(profile, k) <= budget), default=floor)
    starts = min(wanted, affordable)
    capped = needed is None or starts < needed
    return StartsPlan(starts, spread, resolution_at(profile, starts, starts, spread.value), needed,
                      2 * side_seconds(profile, starts), capped)


def pooled_spread(before: Sequence[float], after: Sequence[float]) -> float | None:
    """The start-to-start standard deviation of log start values, pooled over both sides (each side about its own
    mean: a change between them is not spread); None unless a side has two positive finite values.

    >>> round(pooled_spread([100.0, 110.0, 105.0], [50.0, 55.0, 52.5]), 4)
    0.0465
    """
    sides = [[math.log(value) for value in side if math.isfinite(value) and value > 0] for side in (before, after)]
    sides = [side for side in sides if len(side) >= 2]
    if not sides:
        return None
    squares = sum(statistics.variance(side) * (len(side) - 1) for side in sides)
    return math.sqrt(squares / sum(len(side) - 1 for side in sides))


def plan_line(profile: Profile, plan: StartsPlan, before: str, after: str, between: str) -> str:
    """What a measured change will measure, cost and resolve, said before it measures (the dry run prints it).

    + before / after: the two sides in words ("before", "on xllamacpp==2026.10.11549")
    + between: what happens between them ("one reboot", "the move between them (no reboot)")
    """
    floor = profile.bench.verdicts.starts
    why = ("" if plan.starts == floor else
           f" (bench.verdicts.starts is {floor}; more to resolve the tolerance)")
    return (f"plan: {plan.starts} starts {before} and {plan.starts} {after}{why} = about {minutes(plan.seconds)} "
            f"(a side's first start the full bench, the others the judged cells), and {between}; "
            f"{plan.words()}")


def primary_spread(comparison: Comparison) -> float | None:
    """The start-to-start spread of the primary's row, pooled over both sides (None: no primary row measured)."""
    row = next((cell for cell in comparison.cells if cell.primary), None)
    return None if row is None else pooled_spread(row.before_starts, row.after_starts)


def resolution_words(profile: Profile, k_before: int, k_after: int, spread: float | None) -> str:
    """``resolution: 3 vs 3 starts at a start-to-start spread of 4.1 %: ...; 9 starts a side resolve it``."""
    if spread is None:
        return "resolution: the primary's start-to-start spread was not measured (fewer than 2 starts a side)"
    needed = resolving_starts(profile, spread)
    return (f"resolution: {resolution_at(profile, k_before, k_after, spread).describe()}; "
            + (f"{needed} starts a side resolve it" if needed else "more than 30 starts a side would be needed"))
