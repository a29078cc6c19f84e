"""What measured engine starts cost on a profile, said before they run: a start's time to healthy
(``bench.verdicts.engine_start_s``) and its bench (cells x repeats x window, warm-up included).

The recipe tournament (rigforge/recipes/rounds.py) and the driver update (roles/driver_update.py) print these
before they measure; the tournament's extra starts are bounded by ``bench.verdicts.decide_budget_s``.

Example::

    cost_words(load_profile("sandbox"), 6)
    # '6 engine starts of 3 cells x 2 repeats; about 4 min (a start: 5 s to healthy, ... + 45 s of bench)'
"""

from __future__ import annotations

import math

from rigforge.profile import Profile

#: A repeat costs its window and about half of it again: warm-up requests and the client's own start.
REPEAT_OVERHEAD = 1.5


def bench_cells(profile: Profile) -> int:
    """The cells one bench of the profile measures: the completion grid and every extra cell."""
    bench = profile.bench
    extra = sum(len(cells.concurrency) * len(cells.input_tokens) for cells in bench.extra_cells)
    return len(bench.concurrency) * len(bench.input_tokens) + extra


def bench_seconds(profile: Profile) -> float:
    """About how long one bench of the profile takes: every cell, every repeat, warm-up included."""
    return bench_cells(profile) * profile.bench.repeats * profile.bench.cell_seconds * REPEAT_OVERHEAD


def start_seconds(profile: Profile) -> float:
    """About how long one measured start takes: the engine's start until healthy, then one bench."""
    return profile.bench.verdicts.engine_start_s + bench_seconds(profile)


def minutes(seconds: float) -> str:
    """``"12 min"``, ``"40 s"`` under a minute.

    >>> minutes(40.0), minutes(719.0)
    ('40 s', '12 min')
    """
    return f"{seconds:.0f} s" if seconds < 60 else f"{math.ceil(seconds / 60)} min"


def cost_words(profile: Profile, starts: int) -> str:
    """``N engine starts of C cells x R repeats; about M min (a start: E s to healthy + B s of bench)``."""
    verdicts, bench = profile.bench.verdicts, profile.bench
    return (f"{starts} engine start{'s' if starts != 1 else ''} of {bench_cells(profile)} cells x {bench.repeats} "
            f"repeats; about {minutes(starts * start_seconds(profile))} (a start: {verdicts.engine_start_s} s "
            f"to healthy, bench.verdicts.engine_start_s, + {bench_seconds(profile):.0f} s of bench)")


def update_plan_line(profile: Profile) -> str:
    """What a driver update will measure and cost: k starts on the old driver, k on the new, one reboot between."""
    starts = profile.bench.verdicts.starts
    return (f"plan: {starts} starts before and {starts} after = {cost_words(profile, 2 * starts)}, and one reboot; "
            "a recent baseline of as many distinct starts saves the first half")
