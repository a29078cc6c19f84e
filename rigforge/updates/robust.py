"""One bad engine start: a pre-declared rule that sets it aside, so it neither sinks a comparison nor makes one.

A start that came up wrong (a throttled boot, a neighbour's job, an autotuner's bad pick) is slow or fast in every
cell and metric at once. Among k >= 3 starts of one side its values stand apart from the others' by far more than
the others stand apart from each other; kept in, it widens the interval of every judged row until nothing can be
told (one start 40 % slow made every comparison ``cannot tell``), and it says nothing about the change.

The rule, declared before anything is measured and the same for every comparison:

- A start's **shift** is the median, over the comparison's judged rows, of how far its value lies from the median
  start of its side in that row (log units, signed so that worse is negative: lower tok/s, higher ms). A median
  over many rows is what one start shares, not one noisy number.
- A side of at least ``FEWEST_STARTS`` starts sets aside the start with the largest shift when that shift is past
  ``SHIFT`` (0.2 in logs: about 18 % slower or 22 % faster than its side's median start) **and** more than
  ``FACTOR`` times the largest shift among its other starts: a start apart from a tight side, not the widest of a
  wide one (at a 15 % start-to-start spread nothing is set aside that a spread explains).
- At most one start a side; only when every judged row holds a value of every start (so values line up by start).

What follows (rigforge.updates.verdict.judge): the comparison is judged without the set-aside start, and a better
or worse claim must hold with it too — a claim may never rest on setting a start aside, so the rule cannot add a
false claim; what it can do is let the remaining starts say ``same`` (or keep a claim both agree on). The row says
which start was set aside and by how much, so the owner sees it (a driver that makes one start in three slow is
worth knowing about, and a rerun will say so again).

Example::

    set_aside([(100.0, 101.0, 60.0)], [(100.0, 99.0, 100.5)], [True])     # (2, None): the 3rd before-start
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

__all__ = ["FACTOR", "FEWEST_STARTS", "SHIFT", "set_aside", "shifts"]

#: A side needs this many starts before one may be set aside (two remain to measure its spread).
FEWEST_STARTS = 3
#: The least shift (log units) a set-aside start has from its side's median start: about 18 % slower, 22 % faster.
SHIFT = 0.2
#: ... and how many times the largest shift among the side's other starts it must be.
FACTOR = 4.0


def shifts(rows: Sequence[tuple[float, ...]], higher_is_better: Sequence[bool]) -> list[float] | None:
    """Each start's shift from its side's median start (log units, worse negative), None unless every row holds
    one positive finite value per start, as many in every row.

    + rows: per judged row, one value per start of the side, in start order
    + higher_is_better: per row, its metric's direction

    >>> [round(value, 3) for value in shifts([(100.0, 101.0, 60.0), (10.0, 10.0, 16.0)], [True, False])]
    [0.0, 0.005, -0.49]
    """
    counts = {len(values) for values in rows}
    if len(counts) != 1 or not all(math.isfinite(value) and value > 0.0 for values in rows for value in values):
        return None
    (count,) = counts
    per_row = []
    for values, higher in zip(rows, higher_is_better, strict=True):
        logs = [math.log(value) for value in values]
        middle = statistics.median(logs)
        per_row.append([(log - middle) * (1.0 if higher else -1.0) for log in logs])
    return [statistics.median(row[start] for row in per_row) for start in range(count)]


def _side(rows: Sequence[tuple[float, ...]], higher_is_better: Sequence[bool]) -> int | None:
    found = shifts(rows, higher_is_better) if rows else None
    if found is None or len(found) < FEWEST_STARTS:
        return None
    apart = max(range(len(found)), key=lambda start: abs(found[start]))
    others = max(abs(shift) for start, shift in enumerate(found) if start != apart)
    return apart if abs(found[apart]) > SHIFT and abs(found[apart]) > FACTOR * others else None


def set_aside(before: Sequence[tuple[float, ...]], after: Sequence[tuple[float, ...]],
              higher_is_better: Sequence[bool]) -> tuple[int | None, int | None]:
    """The start of each side the rule sets aside (its index in start order), None where it keeps them all.

    + before / after: per judged row, one value per start of that side
    + higher_is_better: per row, its metric's direction

    >>> set_aside([(100.0, 101.0, 99.0)], [(100.0, 99.0, 100.5)], [True])
    (None, None)
    >>> set_aside([(100.0, 120.0, 80.0)], [(100.0, 99.0, 60.0)], [True])   # before: wide, not one apart
    (None, 2)
    """
    return _side(before, higher_is_better), _side(after, higher_is_better)
