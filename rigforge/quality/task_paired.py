"""Two task passes on the same questions, compared question by question (a paired test).

Both runs answer the same questions, so what a change did is in the questions whose mark changed: ``lost`` (right
in the reference, wrong here) and ``gained`` (wrong there, right here). The questions both got right, or both wrong,
say nothing about the change, and an unpaired interval (two Wilson intervals as if two samples had been drawn)
counts their spread anyway: at n = 300 it needed a drop of about 12-16 points before it could see one. Here:

- the drop's 95 % interval is Newcombe's for paired proportions (method 10 of Newcombe 1998, "Improved confidence
  intervals for the difference between binomial proportions based on paired data", Stat Med 17:2635: the two
  Wilson intervals combined with the pairs' correlation); with no question changed it is about a point wide at
  n = 100 (the Wilson intervals' asymmetry), with changed questions it widens with them;
- McNemar's exact test (a two-sided binomial test of ``lost`` against ``gained``, each 1/2 under no change), as
  llm-inference-bench's A/B tests run it, says whether the marks moved more one way than chance would;
- ``smallest_called_drop``: the smallest drop this many questions can call past the tolerance at all (every
  changed question a loss): a drop below it is never "differ", whatever the change.

Example::

    pairs = pair_marks({"q1": True, "q2": True}, {"q1": True, "q2": False})
    pairs.lost, pairs.gained, mcnemar_exact_p(pairs.lost, pairs.gained)      # (1, 0, 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Pairs:
    """The 2x2 table of two runs' marks on the same questions."""

    both: int  # right in both
    lost: int  # right in the reference, wrong here
    gained: int  # wrong in the reference, right here
    neither: int  # wrong in both

    @property
    def total(self) -> int:
        return self.both + self.lost + self.gained + self.neither


def pair_marks(reference: Mapping[str, bool], candidate: Mapping[str, bool]) -> Pairs:
    """The table over the questions both runs answered (ValueError when they answered other questions).

    >>> pair_marks({"q1": True, "q2": False, "q3": True}, {"q1": True, "q2": True, "q3": False})
    Pairs(both=1, lost=1, gained=1, neither=0)
    """
    if set(reference) != set(candidate):
        only = sorted(set(reference) ^ set(candidate))
        raise ValueError(f"the runs answered other questions ({len(only)} differ, first {only[0]})")
    cells = [0, 0, 0, 0]
    for question, right in reference.items():
        cells[(0 if right else 2) + (0 if candidate[question] else 1)] += 1
    both, lost, gained, neither = cells
    return Pairs(both, lost, gained, neither)


def wilson_bounds(successes: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson score interval of a proportion, as fractions."""
    if total == 0:
        return (0.0, 1.0)
    rate = successes / total
    centre = (rate + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(rate * (1 - rate) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return (max(0.0, centre - half), min(1.0, centre + half))


def paired_drop_interval(pairs: Pairs) -> tuple[float, float]:
    """The 95 % interval of the reference's score minus the candidate's, in points (Newcombe's method 10).

    >>> [round(bound, 1) for bound in paired_drop_interval(Pairs(60, 0, 0, 40))]
    [-0.7, 0.7]
    >>> [round(bound, 1) for bound in paired_drop_interval(Pairs(70, 20, 0, 10))]
    [12.3, 28.3]
    """
    n = pairs.total
    if n == 0:
        return (-100.0, 100.0)
    first, second = pairs.both + pairs.lost, pairs.both + pairs.gained  # right in the reference, here
    p1, p2 = first / n, second / n
    (l1, u1), (l2, u2) = wilson_bounds(first, n), wilson_bounds(second, n)
    margins = first * (n - first) * second * (n - second)
    phi = ((pairs.both * pairs.neither - pairs.lost * pairs.gained) / math.sqrt(margins)) if margins else 0.0
    below = (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2
    above = (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2
    drop = p1 - p2
    return (100.0 * (drop - math.sqrt(max(0.0, below))), 100.0 * (drop + math.sqrt(max(0.0, above))))


def mcnemar_exact_p(lost: int, gained: int) -> float:
    """McNemar's exact two-sided p: the chance of a split of the changed questions at least this uneven.

    >>> mcnemar_exact_p(0, 0), round(mcnemar_exact_p(8, 1), 4), round(mcnemar_exact_p(3, 2), 4)
    (1.0, 0.0391, 1.0)
    """
    changed = lost + gained
    if changed == 0:
        return 1.0
    tail = sum(math.comb(changed, count) for count in range(min(lost, gained) + 1)) / 2 ** changed
    return min(1.0, 2 * tail)


def smallest_called_drop(total: int, right: int, max_drop_points: float) -> float | None:
    """The smallest drop, in points, that ``total`` questions can call past ``max_drop_points``: every changed
    question a loss from a reference with ``right`` right (None: not even losing every right answer would).

    >>> smallest_called_drop(300, 270, 8), smallest_called_drop(40, 28, 8), smallest_called_drop(10, 1, 8)
    (11.7, 22.5, None)
    """
    for lost in range(1, right + 1):
        low, _ = paired_drop_interval(Pairs(right - lost, lost, 0, total - right))
        if low > max_drop_points:
            return round(100.0 * lost / total, 1)
    return None
