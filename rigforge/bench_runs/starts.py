"""What measured engine starts cost on a profile, said before they run: a start's time to healthy
(``bench.verdicts.engine_start_s``) and its bench (cells x repeats x window, warm-up included).

The recipe tournament (rigforge/recipes/rounds.py) and the driver update (roles/driver_update.py) print these
before they measure; the tournament's extra starts are bounded by ``bench.verdicts.decide_budget_s``, a measured
change's by ``driver_update.starts_budget_s`` (rigforge/updates/sizing.py).

Once a side's first start has taken the full pass, its other starts bench only the **judged cells**
(``judged_profile``): the cells a ``bench.regression_tolerance`` rule names, the only ones a verdict reads more
starts of. The shipped profiles judge decode per user in every cell, so there it is the whole grid; a profile whose
rules name fewer cells saves the rest.

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


def _judges(profile: Profile, concurrency: int, input_tokens: int) -> bool:
    return any(rule.concurrency in (None, concurrency) and rule.input_tokens in (None, input_tokens)
               for rule in profile.bench.regression_tolerance)


def judged_profile(profile: Profile) -> Profile:
    """The profile with its bench narrowed to the smallest grid holding every judged cell (a rule names it), in the
    completion grid and in each extra grid; an extra grid with none is dropped. Unchanged when every cell is judged.

    >>> from rigforge.profile.loader import load_profile
    >>> judged_profile(load_profile("sandbox")).bench.concurrency
    [1, 2, 4]
    """
    bench = profile.bench

    def narrowed(levels: list[int], lengths: list[int]) -> tuple[list[int], list[int]]:
        cells = [(c, n) for c in levels for n in lengths if _judges(profile, c, n)]
        return [c for c in levels if any(c == cell[0] for cell in cells)], \
            [n for n in lengths if any(n == cell[1] for cell in cells)]

    concurrency, input_tokens = narrowed(list(bench.concurrency), list(bench.input_tokens))
    extra = []
    for cells in bench.extra_cells:
        levels, lengths = narrowed(list(cells.concurrency), list(cells.input_tokens))
        if levels and lengths:
            extra.append(cells.model_copy(update={"concurrency": levels, "input_tokens": lengths}))
    if (concurrency, input_tokens, extra) == (list(bench.concurrency), list(bench.input_tokens),
                                              list(bench.extra_cells)):
        return profile
    return profile.model_copy(update={"bench": bench.model_copy(
        update={"concurrency": concurrency, "input_tokens": input_tokens, "extra_cells": extra})})


def bench_seconds(profile: Profile) -> float:
    """About how long one bench of the profile takes: every cell, every repeat, warm-up included."""
    return bench_cells(profile) * profile.bench.repeats * profile.bench.cell_seconds * REPEAT_OVERHEAD


def start_seconds(profile: Profile) -> float:
    """About how long one measured start takes: the engine's start until healthy, then one bench."""
    return profile.bench.verdicts.engine_start_s + bench_seconds(profile)


def judged_start_seconds(profile: Profile) -> float:
    """About how long a start after a side's first takes: its start until healthy, then the judged cells' bench."""
    return start_seconds(judged_profile(profile))


def side_seconds(profile: Profile, starts: int) -> float:
    """About how long one side of ``starts`` engine starts takes: the first the full pass, the others judged cells."""
    return start_seconds(profile) + max(starts - 1, 0) * judged_start_seconds(profile) if starts else 0.0


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
