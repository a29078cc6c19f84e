"""Compare two bench results cell by cell, with the measured run-to-run noise, and give a verdict.

Verdicts (``Comparison.verdict``):

- ``"pass"``: every judged change is better, or worse by no more than the profile's tolerance.
- ``"within noise"``: something is worse than its tolerance, but the runs cannot tell it from noise:
  the change is no more than the spread measured between repeats of that cell (before or after)
  *and* the best "after" repeat still reaches the worst "before" repeat.
- ``"regression"``: something is worse than its tolerance and the repeats do not overlap (or the
  change is past the measured spread), or a cell that measured before failed (or is missing) after.

Judged metrics are those the profile's ``bench.regression_tolerance`` rules name; the others are
shown but never decide. Noise of a metric in a cell = (max - min) / median of its per-repeat values,
the larger of before and after; a cell measured once has no measured noise (shown as "no repeats").
Rendering lives in ``compare_render`` and the command line in ``compare`` (``python -m
rigforge.updates.compare``); both import this module, never the other way round.
Both conditions matter: a wide spread alone (one slow repeat on a loaded box) must not excuse an
"after" whose every repeat is slower than every "before" repeat.

Example::

    comparison = compare(load_result(before_dir), load_result(after_dir), RegressionPolicy.from_profile(profile))
    print(render_markdown(comparison))                # rigforge.updates.compare_render
    render_plot(comparison, after_dir / "compare.png")
    print(comparison.summary())  # decode C=1 in=128: 31.2 → 29.8 tok/s (-4.5 %, within noise ±6.1 %)
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from rigforge.bench.config import COMPLETIONS, CellKind
from rigforge.updates.history import find_results, last_before, last_before_driver_change, load_result

__all__ = [
    "METRICS", "Cell", "Comparison", "Metric", "RegressionPolicy", "Tolerance",
    "compare", "find_results", "last_before", "last_before_driver_change", "load_result",
]

PASS, WITHIN_NOISE, REGRESSION = "pass", "within noise", "regression"
DASH = "–"


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
METRIC_NAMES = tuple(metric.name for metric in METRICS)


@dataclass(frozen=True)
class Tolerance:
    """How much worse (in %) a metric may get; None concurrency/input_tokens: every cell."""

    metric: str
    max_worse_percent: float
    concurrency: int | None = None
    input_tokens: int | None = None

    def specificity(self, concurrency: int, input_tokens: int) -> int:
        """-1 if the rule does not apply to the cell, else how many of its cell fields matched."""
        score = 0
        for wanted, actual in ((self.concurrency, concurrency), (self.input_tokens, input_tokens)):
            if wanted is not None:
                if wanted != actual:
                    return -1
                score += 1
        return score


@dataclass(frozen=True)
class RegressionPolicy:
    """The tolerance rules; for a (cell, metric) the most specific matching rule applies."""

    tolerances: tuple[Tolerance, ...] = ()

    @classmethod
    def from_profile(cls, profile: Any) -> RegressionPolicy:
        """The policy of a Profile's ``bench.regression_tolerance`` (objects or mappings)."""
        rules = getattr(profile.bench, "regression_tolerance", None) or []
        return cls(tuple(_as_tolerance(rule) for rule in rules))

    def tolerance(self, metric: str, concurrency: int, input_tokens: int) -> float | None:
        """Allowed worsening in %, None if no rule judges this metric in this cell."""
        best: tuple[int, float] | None = None
        for rule in self.tolerances:
            score = rule.specificity(concurrency, input_tokens) if rule.metric == metric else -1
            if score >= 0 and (best is None or score > best[0]):
                best = (score, rule.max_worse_percent)
        return None if best is None else best[1]


def _as_tolerance(rule: Any) -> Tolerance:
    def read(name: str) -> Any:
        return rule.get(name) if isinstance(rule, Mapping) else getattr(rule, name, None)

    return Tolerance(read("metric"), float(read("max_worse_percent")), read("concurrency"), read("input_tokens"))


@dataclass(frozen=True)
class Cell:
    """One row: a metric of one cell, before and after, and what it means."""

    concurrency: int
    input_tokens: int
    metric: Metric
    before: float | None
    after: float | None
    change_percent: float | None  # (after - before) / before, signed
    noise_percent: float | None  # measured run-to-run spread, None without repeats
    tolerance_percent: float | None  # None: shown, not judged
    verdict: str  # pass | within noise | regression | "" (not judged)
    note: str = ""
    kind: CellKind = COMPLETIONS  # how the cell's requests were sent (completions, chat with thinking on...)

    @property
    def where(self) -> str:
        """``C=1 in=128``, with the kind for a cell other than a completion cell: ``C=1 in=128 (chat)``."""
        where = f"C={self.concurrency} in={self.input_tokens}"
        return where if self.kind == COMPLETIONS else f"{where} ({self.kind.label})"

    @property
    def worse_percent(self) -> float | None:
        """How much worse after is than before, in % (negative: better)."""
        if self.change_percent is None:
            return None
        return -self.change_percent if self.metric.higher_is_better else self.change_percent

    def describe(self) -> str:
        """decode C=1 in=128: 31.2 → 29.8 tok/s (-4.5 %, within noise ±6.1 %)."""
        where = f"{self.metric.label} {self.where}"
        if self.before is None or self.after is None:
            values = f"{_num(self.before)} → {_num(self.after)} {self.metric.unit}"
            return f"{where}: {values} ({self.note or 'not comparable'})"
        noise = "no repeats" if self.noise_percent is None else f"±{self.noise_percent:.1f} %"
        tolerance = f"tolerance {self.tolerance_percent:g} %"
        judged = {
            PASS: f"pass: {tolerance}, noise {noise}",
            WITHIN_NOISE: f"within noise {noise}, {tolerance}",
            REGRESSION: f"regression: beyond {tolerance}, not explained by noise {noise}",
        }.get(self.verdict, f"not judged, noise {noise}")
        values = f"{self.before:.1f} → {self.after:.1f} {self.metric.unit}"
        return f"{where}: {values} ({self.change_percent:+.1f} %, {judged})"


@dataclass(frozen=True)
class Comparison:
    """The rows of two results side by side and the overall verdict."""

    before_metadata: Mapping[str, Any]
    after_metadata: Mapping[str, Any]
    cells: tuple[Cell, ...]
    verdict: str

    @property
    def regressed(self) -> bool:
        return self.verdict == REGRESSION

    def deciding_cell(self) -> Cell | None:
        """The judged row that decided the verdict (the worst), else the first decode row."""
        rank = {REGRESSION: 2, WITHIN_NOISE: 1, PASS: 0}
        judged = [cell for cell in self.cells if cell.verdict]
        if judged:
            return max(judged, key=lambda cell: (rank[cell.verdict], cell.worse_percent or 0.0))
        return next((cell for cell in self.cells if cell.metric.name == "decode_tps_per_user"), None)

    def summary(self) -> str:
        """One line for logs and fleet tables."""
        cell = self.deciding_cell()
        return f"{self.verdict}: " + (cell.describe() if cell else "no cells to compare")


def _num(value: float | None) -> str:
    return DASH if value is None else f"{value:.1f}"


def _cells_by_key(result: Mapping[str, Any]) -> dict[tuple[CellKind, int, int], Mapping[str, Any]]:
    """Every cell of a result, ok or failed, by (kind, concurrency, input tokens): a chat cell is never
    compared with a completion cell of the same size (a result without kinds holds completion cells only)."""
    return {(CellKind.of(cell), cell["concurrency"], cell["input_tokens"]): cell for cell in result.get("cells", [])}


def repeat_values(cell: Mapping[str, Any], metric: Metric) -> list[float]:
    """The metric's value in each repeat of the cell (``cell.repeats``: one metrics block per repeat)."""
    blocks = [repeat for repeat in cell.get("repeats") or [] if repeat]
    values = [metric.read(block) for block in blocks]
    return [value for value in values if value is not None]


def cell_value(cell: Mapping[str, Any], metric: Metric) -> float | None:
    """Median over the repeats if measured with repeats, else the cell's own metrics."""
    values = repeat_values(cell, metric)
    if values:
        return statistics.median(values)
    return metric.read(cell.get("metrics") or {})


def spread_percent(values: list[float]) -> float | None:
    """(max - min) / median in %, None with fewer than two values."""
    if len(values) < 2:
        return None
    middle = statistics.median(values)
    return 0.0 if middle == 0 else (max(values) - min(values)) / abs(middle) * 100


def _noise(before: Mapping[str, Any], after: Mapping[str, Any], metric: Metric) -> float | None:
    spreads = [spread_percent(repeat_values(cell, metric)) for cell in (before, after)]
    known = [spread for spread in spreads if spread is not None]
    return max(known) if known else None


def repeats_overlap(before: Mapping[str, Any], after: Mapping[str, Any], metric: Metric) -> bool:
    """Whether the best repeat after is at least as good as the worst repeat before."""
    values_before = repeat_values(before, metric) or [cell_value(before, metric) or 0.0]
    values_after = repeat_values(after, metric) or [cell_value(after, metric) or 0.0]
    if metric.higher_is_better:
        return max(values_after) >= min(values_before)
    return min(values_after) <= max(values_before)


def judge_change(worse_percent: float, tolerance: float, noise: float | None, overlap: bool) -> str:
    """pass if within tolerance; within noise if inside the spread with overlapping repeats; else regression."""
    if worse_percent <= tolerance:
        return PASS
    if noise is not None and worse_percent <= noise and overlap:
        return WITHIN_NOISE
    return REGRESSION


def compare_cell(key: tuple[CellKind, int, int], before: Mapping[str, Any] | None, after: Mapping[str, Any] | None,
                 metric: Metric, policy: RegressionPolicy) -> Cell:
    """One row; a cell that measured before but failed or vanished after is a regression if judged."""
    kind, concurrency, input_tokens = key
    tolerance = policy.tolerance(metric.name, concurrency, input_tokens)
    ok_before = before is not None and before.get("status") == "ok"
    ok_after = after is not None and after.get("status") == "ok"
    value_before = cell_value(before, metric) if ok_before else None
    value_after = cell_value(after, metric) if ok_after else None
    if value_before is None or value_after is None:
        lost = value_before is not None and tolerance is not None
        note = "failed or missing after" if value_before is not None else "failed or missing before"
        return Cell(concurrency, input_tokens, metric, value_before, value_after, None, None, tolerance,
                    REGRESSION if lost else "", note, kind)
    change = 0.0 if value_before == 0 else (value_after - value_before) / value_before * 100
    noise = _noise(before, after, metric)
    row = Cell(concurrency, input_tokens, metric, value_before, value_after, change, noise, tolerance, "", "", kind)
    if tolerance is None:
        return row
    return replace(row, verdict=judge_change(row.worse_percent or 0.0, tolerance, noise,
                                             repeats_overlap(before, after, metric)))


def overall(cells: Iterable[Cell]) -> str:
    """regression beats within noise beats pass."""
    verdicts = {cell.verdict for cell in cells}
    return REGRESSION if REGRESSION in verdicts else WITHIN_NOISE if WITHIN_NOISE in verdicts else PASS


def compare(before: Mapping[str, Any], after: Mapping[str, Any], policy: RegressionPolicy) -> Comparison:
    """Compare two results (as loaded by ``load_result``) under the profile's policy.

    + before: the baseline result, e.g. the last one on the previous driver
    + after: the result to judge
    + policy: ``RegressionPolicy.from_profile(profile)``
    """
    cells_before, cells_after = _cells_by_key(before), _cells_by_key(after)
    # Completion cells first, then each other kind; by concurrency and input length within a kind.
    keys = sorted(set(cells_before) | set(cells_after), key=lambda key: (*key[0].order, key[1], key[2]))
    rows = tuple(
        compare_cell(key, cells_before.get(key), cells_after.get(key), metric, policy)
        for key in keys for metric in METRICS
    )
    return Comparison(before.get("metadata") or {}, after.get("metadata") or {}, rows, overall(rows))
