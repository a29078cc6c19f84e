"""The cells of a recipe experiment's results: which cell, its numbers, the primary over engine starts.

Pure functions over bench results (``result.json``), used by rigforge.recipes.report and its plot.

Example::

    measured_value(result, "decode_tps_per_user", (COMPLETIONS, 1, 128))     # 30.4
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from rigforge.bench.config import COMPLETIONS, CellKind
from rigforge.updates.comparison import METRICS, Metric, RegressionPolicy, cell_value, repeat_values

#: A cell of a result: its kind (completions, chat…), concurrency and prompt length.
Key = tuple[CellKind, int, int]
DASH = "–"


def metric(name: str) -> Metric:
    return next(item for item in METRICS if item.name == name)


def cell_key(cell: Mapping[str, Any]) -> Key:
    return CellKind.of(dict(cell)), cell["concurrency"], cell["input_tokens"]


def where(key: Key) -> str:
    """``C=1 in=128``, or ``C=1 in=128 (chat, thinking off)`` for a cell of another kind."""
    kind, concurrency, input_tokens = key
    text = f"C={concurrency} in={input_tokens}"
    return text if kind == COMPLETIONS else f"{text} ({kind.label})"


def _cell(result: Mapping[str, Any], key: Key) -> Mapping[str, Any] | None:
    return next((cell for cell in result.get("cells", []) if cell_key(cell) == key and cell.get("status") == "ok"),
                None)


def _fmt(value: float | None) -> str:
    return DASH if value is None else f"{value:.1f}"


def measured_value(result: Mapping[str, Any] | None, name: str, key: Key) -> float | None:
    """One start's value of one metric in one cell (the geometric mean of its repeats; None: not measured or
    failed)."""
    cell = _cell(result or {}, key)
    return cell_value(cell, metric(name)) if cell else None


def over_starts(results: Sequence[Mapping[str, Any]], name: str, key: Key) -> float | None:
    """The median over engine starts of each start's value (None: no start measured it)."""
    values = [value for value in (measured_value(result, name, key) for result in results) if value is not None]
    return statistics.median(values) if values else None


def primary_value(results: Sequence[Mapping[str, Any]], policy: RegressionPolicy) -> float | None:
    """The profile's primary metric in its cell over these starts (None: no primary, or not measured)."""
    if policy.primary is None:
        return None
    return over_starts(results, policy.primary.metric,
                       (COMPLETIONS, policy.primary.concurrency, policy.primary.input_tokens))


def primary_label(policy: RegressionPolicy) -> str:
    """``decode C=1 in=128``, or "" without a primary."""
    if policy.primary is None:
        return ""
    return f"{metric(policy.primary.metric).label} C={policy.primary.concurrency} in={policy.primary.input_tokens}"


def decode_c1(result: Mapping[str, Any]) -> float | None:
    """Decode tok/s per user in the result's first cell (lowest concurrency, shortest prompt)."""
    cells = sorted((cell for cell in result.get("cells", [])
                    if cell.get("status") == "ok" and CellKind.of(cell) == COMPLETIONS),
                   key=lambda cell: (cell["concurrency"], cell["input_tokens"]))
    return cell_value(cells[0], metric("decode_tps_per_user")) if cells else None


def repeats_of(result: Mapping[str, Any] | None, name: str, key: Key) -> list[float]:
    """The per-repeat values of one metric in one cell (the chart's spread), empty when not measured."""
    cell = _cell(result or {}, key)
    return repeat_values(cell, metric(name)) if cell else []
