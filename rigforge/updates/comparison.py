"""Compare two bench results cell by cell and give a verdict that survives an A/A test.

Verdicts (``Comparison.verdict``, decided by rigforge.updates.verdict, which says why each is claimed):

- ``"better"``: the profile's primary metric (``bench.primary``) improved significantly across the repeats,
  beyond its tolerance and beyond the measured noise, and no other judged metric got worse.
- ``"worse (regression)"``: some judged metric got significantly worse, beyond its tolerance and the noise, or a
  cell that measured before failed (or is missing) after. Any judged metric can veto this way.
- ``"same"``: no claim, and the primary's confidence interval lies inside ± its tolerance.
- ``"cannot tell"``: no claim, and the repeats are too few or too noisy to say "same" (the row says how many
  repeats would likely decide).

Judged metrics are those the profile's ``bench.regression_tolerance`` rules name; the others are shown but
never decide. ``before_again`` (the recipe tournament measures its start a second time at the end) is pooled
with ``before``, and their difference is the start's drift, which a change must exceed too.
Rendering lives in ``compare_render`` and the command line in ``compare`` (``python -m
rigforge.updates.compare``); both import this module, never the other way round.

Example::

    comparison = compare(load_result(before_dir), load_result(after_dir), RegressionPolicy.from_profile(profile))
    print(render_markdown(comparison))                # rigforge.updates.compare_render
    print(comparison.summary())  # same: decode C=1 in=128: 31.2 → 30.8 tok/s (-1.3 %, within ±5 % ...)
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rigforge.bench.config import COMPLETIONS, CellKind
from rigforge.updates.history import find_results, last_before, last_before_driver_change, load_result
from rigforge.updates.policy import Primary, RegressionPolicy, Tolerance
from rigforge.updates.verdict import BETTER, CANNOT_TELL, SAME, WORSE, Answer, Question, judge, overall

__all__ = [
    "BETTER", "CANNOT_TELL", "METRICS", "REGRESSION", "SAME", "WORSE", "Cell", "Comparison", "Metric", "Primary",
    "RegressionPolicy", "Tolerance", "compare", "find_results", "last_before", "last_before_driver_change",
    "load_result",
]

#: The regression verdict under its older name.
REGRESSION = WORSE
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
class Cell:
    """One row: a metric of one cell, before and after, and what it means."""

    concurrency: int
    input_tokens: int
    metric: Metric
    before: float | None  # median over the repeats (before: both runs of the start, pooled)
    after: float | None
    change_percent: float | None  # (after - before) / before, signed, of the medians
    noise_percent: float | None  # the noise a claim must exceed; None without two repeats a side
    tolerance_percent: float | None  # None: shown, not judged
    verdict: str  # better | worse (regression) | same | cannot tell | "" (not judged)
    note: str = ""
    kind: CellKind = COMPLETIONS  # how the cell's requests were sent (completions, chat with thinking on...)
    before_repeats: tuple[float, ...] = ()
    after_repeats: tuple[float, ...] = ()
    p_value: float | None = None
    drift_percent: float | None = None  # the start's own change between its two runs
    repeats_to_decide: int | None = None
    primary: bool = False

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
        """decode C=1 in=128: 31.2 → 18.8 tok/s (-39.7 %; p = 0.003, beyond tolerance 5 % and noise ±4.1 %)."""
        where = f"{self.metric.label} {self.where}"
        if self.before is None or self.after is None:
            values = f"{_num(self.before)} → {_num(self.after)} {self.metric.unit}"
            return f"{where}: {values} ({self.note or 'not comparable'})"
        values = f"{self.before:.1f} → {self.after:.1f} {self.metric.unit}"
        return f"{where}: {values} ({self.change_percent:+.1f} %; {self.note if self.verdict else 'not judged'})"


@dataclass(frozen=True)
class Comparison:
    """The rows of two results side by side and the overall verdict."""

    before_metadata: Mapping[str, Any]
    after_metadata: Mapping[str, Any]
    cells: tuple[Cell, ...]
    verdict: str
    deciding: int | None = None  # the row that decided the verdict

    @property
    def regressed(self) -> bool:
        return self.verdict == WORSE

    def deciding_cell(self) -> Cell | None:
        """The row that decided the verdict, else the first decode row."""
        if self.deciding is not None:
            return self.cells[self.deciding]
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


def drift_percent(first: Mapping[str, Any] | None, again: Mapping[str, Any] | None, metric: Metric) -> float | None:
    """How far the start's second run moved from its first (signed %, medians), None unless both measured."""
    if not first or not again or first.get("status") != "ok" or again.get("status") != "ok":
        return None
    old, new = cell_value(first, metric), cell_value(again, metric)
    return None if not old or new is None else (new - old) / old * 100


def _side(cells: list[Mapping[str, Any] | None], metric: Metric) -> tuple[float, ...]:
    """Every repeat of the ok cells given (the start's runs pooled), each cell's own number without repeats."""
    values: list[float] = []
    for cell in cells:
        if cell is not None and cell.get("status") == "ok":
            repeats = repeat_values(cell, metric)
            single = cell_value(cell, metric)
            values += repeats or ([single] if single is not None else [])
    return tuple(values)


def compare_cell(key: tuple[CellKind, int, int], before: list[Mapping[str, Any] | None],
                 after: Mapping[str, Any] | None, metric: Metric, policy: RegressionPolicy) -> Cell:
    """One row before its verdict (``compare`` judges the judged rows together); a cell that measured before
    but failed or vanished after is a regression if judged."""
    kind, concurrency, input_tokens = key
    tolerance = policy.tolerance(metric.name, concurrency, input_tokens)
    primary = policy.primary is not None and policy.primary.names(key, metric.name)
    values_before, values_after = _side(before, metric), _side([after], metric)
    if not values_before or not values_after:
        lost = bool(values_before) and tolerance is not None
        note = "failed or missing after" if values_before else "failed or missing before"
        return Cell(concurrency, input_tokens, metric, _median(values_before), _median(values_after), None, None,
                    tolerance, WORSE if lost else "", note, kind, values_before, values_after, primary=primary)
    old, new = statistics.median(values_before), statistics.median(values_after)
    change = 0.0 if old == 0 else (new - old) / old * 100
    drifts = [drift for drift in (drift_percent(before[0], again, metric) for again in before[1:]) if drift is not None]
    drift = max(drifts, key=abs) if drifts else None  # the largest: the start's runs moved at least this much
    return Cell(concurrency, input_tokens, metric, old, new, change, None, tolerance, "", "", kind,
                values_before, values_after, drift_percent=drift, primary=primary)


def _median(values: tuple[float, ...]) -> float | None:
    return statistics.median(values) if values else None


def _judged(row: Cell, answer: Answer) -> Cell:
    return replace(row, verdict=answer.verdict, note=answer.why, noise_percent=answer.noise_percent,
                   p_value=answer.p_value, repeats_to_decide=answer.repeats_to_decide)


def compare(before: Mapping[str, Any], after: Mapping[str, Any], policy: RegressionPolicy,
            before_again: Sequence[Mapping[str, Any]] = ()) -> Comparison:
    """Compare two results (as loaded by ``load_result``) under the profile's policy.

    + before: the baseline result, e.g. the last one on the previous driver, or the tournament's start
    + after: the result to judge
    + policy: ``RegressionPolicy.from_profile(profile)``
    + before_again: the baseline's later runs (A … A): pooled with ``before``; their drift is noise too
    """
    cells_before, cells_after = _cells_by_key(before), _cells_by_key(after)
    runs_again = [_cells_by_key(result) for result in before_again]
    # Completion cells first, then each other kind; by concurrency and input length within a kind.
    keys = sorted(set(cells_before) | set(cells_after), key=lambda key: (*key[0].order, key[1], key[2]))
    rows = [compare_cell(key, [cells_before.get(key), *(cells.get(key) for cells in runs_again)],
                         cells_after.get(key), metric, policy)
            for key in keys for metric in METRICS]
    judged = [index for index, row in enumerate(rows) if row.tolerance_percent is not None and not row.verdict
              and row.change_percent is not None]
    questions = [Question(rows[index].before_repeats, rows[index].after_repeats, rows[index].metric.higher_is_better,
                          rows[index].tolerance_percent or 0.0, rows[index].primary, rows[index].drift_percent)
                 for index in judged]
    for index, answer in zip(judged, judge(questions, policy.false_claim_rate), strict=True):
        rows[index] = _judged(rows[index], answer)
    return _verdict(before, after, tuple(rows))


def _verdict(before: Mapping[str, Any], after: Mapping[str, Any], rows: tuple[Cell, ...]) -> Comparison:
    """The rows' verdict: a lost judged cell or a worse row vetoes; else the primary's verdict (rigforge.updates.
    verdict.overall); without a primary, same only when every judged row is."""
    lost = [index for index, row in enumerate(rows) if row.verdict == WORSE and row.change_percent is None]
    judged = [index for index, row in enumerate(rows) if row.verdict and row.change_percent is not None]
    primary = next((position for position, index in enumerate(judged) if rows[index].primary), None)
    answers = [Answer(rows[index].verdict, rows[index].change_percent, rows[index].p_value, rows[index].noise_percent,
                      None, rows[index].repeats_to_decide, rows[index].note) for index in judged]
    verdict, deciding = overall(answers, primary)
    if lost:
        return Comparison(before.get("metadata") or {}, after.get("metadata") or {}, rows, WORSE, lost[0])
    if not judged:
        verdict, deciding = SAME, None
    return Comparison(before.get("metadata") or {}, after.get("metadata") or {}, rows, verdict,
                      judged[deciding] if deciding is not None else None)

