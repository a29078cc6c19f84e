"""One value per engine start: the numbers a comparison reads from bench results, and the sides it compares.

A bench side is one or more **engine starts** (the engine loaded, warmed up and measured ``bench.repeats`` times
in a row). Repeats inside a start share whatever that start got — the autotuner's choice, the clocks, a
neighbour's load (rig-facts §8.4: "FlashInfer autotuner makes single runs vary +/-15 %", which is why the
published 2x PIX numbers average 3 full server restarts) — so they say how steady that start was, not where
another start would land. The comparison therefore works on one value per start: the geometric mean of that
start's repeats (a speed is a ratio: the mean of its logs), or the cell's own number when it was measured once.

Example::

    starts = as_starts([result_a1, result_a2, result_a3])        # a side of three engine starts
    start_value(starts[0]["cells"][0], METRICS[0])                # decode tok/s per user of that start
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["METRICS", "Metric", "Side", "as_starts", "cell_value", "geometric_mean", "repeat_values", "start_value"]

#: One side of a comparison: one result (one engine start), or one result per engine start.
Side = Mapping[str, Any] | Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class Metric:
    """One compared number of a cell: where it sits in ``metrics`` and which way is better."""

    name: str  # the name tolerance rules use
    label: str
    unit: str
    key: str
    stat: str | None  # None: metrics[key] is the number itself
    higher_is_better: bool

    def read(self, metrics: Mapping[str, Any]) -> float | None:
        """The value in one metrics block, None if absent."""
        value = metrics.get(self.key)
        if self.stat is not None:
            value = (value or {}).get(self.stat)
        return None if value is None else float(value)


METRICS = (
    Metric("decode_tps_per_user", "decode", "tok/s", "decode_tps_per_user", "median", True),
    Metric("output_tps", "output", "tok/s", "output_throughput", None, True),
    Metric("ttft_p50_ms", "TTFT p50", "ms", "ttft_ms", "median", False),
    Metric("ttft_p99_ms", "TTFT p99", "ms", "ttft_ms", "p99", False),
    Metric("itl_p50_ms", "ITL p50", "ms", "itl_ms", "median", False),
    Metric("itl_p99_ms", "ITL p99", "ms", "itl_ms", "p99", False),
)


def as_starts(side: Side | None) -> tuple[Mapping[str, Any], ...]:
    """The engine starts of one side: a single result is one start; empty results are dropped.

    >>> len(as_starts({"cells": []})), len(as_starts([{"cells": []}, {"cells": []}])), as_starts(None)
    (1, 2, ())
    """
    if side is None:
        return ()
    starts = (side,) if isinstance(side, Mapping) else tuple(side)
    return tuple(start for start in starts if start is not None)


def repeat_values(cell: Mapping[str, Any], metric: Metric) -> list[float]:
    """The metric's value in each repeat of the cell (``cell.repeats``: one metrics block per repeat)."""
    blocks = [repeat for repeat in cell.get("repeats") or [] if repeat]
    values = [metric.read(block) for block in blocks]
    return [value for value in values if value is not None]


def start_value(cell: Mapping[str, Any], metric: Metric) -> float | None:
    """The start's value of the metric: the geometric mean of its repeats (the cell's own number without
    repeats); NaN if a repeat is not a finite number, 0.0 if one is zero or less (no logarithm: the verdict
    refuses both with its reason); None if the cell did not record the metric.

    >>> decode = METRICS[0]
    >>> round(start_value({"repeats": [{"decode_tps_per_user": {"median": v}} for v in (20.0, 80.0)]}, decode), 9)
    40.0
    """
    values = repeat_values(cell, metric)
    if not values:
        return metric.read(cell.get("metrics") or {})
    if not all(math.isfinite(value) for value in values):
        return math.nan
    if min(values) <= 0:
        return 0.0
    return geometric_mean(values)


def geometric_mean(values: Sequence[float]) -> float:
    """Of positive values, relative to the smallest (equal values give that value exactly, any order the same).

    >>> geometric_mean([7.0, 7.0]), round(geometric_mean([10.0, 1000.0]), 9)
    (7.0, 100.0)
    """
    smallest = min(values)
    return smallest * math.exp(math.fsum(math.log(value / smallest) for value in values) / len(values))


#: The number a report shows for a cell of one result: the same value a comparison tests.
cell_value = start_value
