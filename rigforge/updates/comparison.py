"""Compare two bench sides cell by cell and give a verdict that survives an A/A test.

A side is one result per **engine start** (a single result is one start). Each start's value of a metric is the
geometric mean of the repeats measured inside it (rigforge.updates.starts), and the verdict works on those
values, so the spread that decides is the start-to-start spread: repeats back to back inside one start share
that start's luck (rig-facts §8.4: the autotuner alone moves single runs ±15 %) and cannot measure it. This is
the one-level model on start means (the analysis of a nested design's top level): with a balanced number of
repeats per start it tests the same hypothesis as a two-level model and needs no estimate of how the two levels
split; the repeats still make each start's value steadier. One start a side is ``cannot tell``: the
start-to-start noise is then unmeasured, however steady its repeats.

Verdicts (``Comparison.verdict``, decided by rigforge.updates.verdict, which says why each is claimed):

- ``"better"``: the profile's primary metric (``bench.primary``) improved, the whole interval of the change past
  its tolerance (the interval's width is the measured start-to-start noise), and no other judged metric got
  worse.
- ``"worse (regression)"``: some judged metric got worse the same way, or a cell that measured before failed
  (or is missing) after in any start. Any judged metric can veto this way.
- ``"same"``: no claim, and every judged metric's 90 % interval lies inside ± its own tolerance (TOST on each).
- ``"cannot tell"``: no claim, and some judged metric is not same: the starts are too few or too noisy, a metric
  other than the primary moved past its tolerance for the better, or a judged row is unjudgeable (a NaN, a value
  of zero or less, one start a side). The row says why, what the starts resolve at the spread they measured
  (``Cell.resolution``) and how many engine starts a side would resolve the tolerance (``Cell.starts_to_decide``).

One bad start a side (rigforge.updates.robust) is set aside when every judged row holds a value of every start;
a claim must then hold with it too (``Cell.set_aside`` says which). ``Comparison.resolution()`` is the primary
row's resolution, said in every ``cannot tell`` summary.

Judged metrics are those the profile's ``bench.regression_tolerance`` rules name; the others are shown but
never decide. The row shows the statistic that decided: the ratio of the geometric means of the start values,
as a change in %, with its interval. Rendering lives in ``compare_render`` and the command line in ``compare``
(``python -m rigforge.updates.compare``); both import this module, never the other way round.

Example::

    comparison = compare([load_result(run) for run in before_runs], [load_result(run) for run in after_runs],
                         RegressionPolicy.from_profile(profile))
    print(render_markdown(comparison))                # rigforge.updates.compare_render
    print(comparison.summary())  # same: decode C=1 in=128: 31.2 → 30.8 tok/s (-1.3 %; within ±5 % ...)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rigforge.bench.config import COMPLETIONS, CellKind
from rigforge.updates.history import find_results, last_before, last_before_driver_change, load_result
from rigforge.updates.policy import Primary, RegressionPolicy, Tolerance
from rigforge.updates.resolution import Resolution
from rigforge.updates.starts import (
    METRICS,
    Metric,
    Side,
    as_starts,
    cell_value,
    geometric_mean,
    repeat_values,
    start_value,
)
from rigforge.updates.verdict import (
    BETTER,
    CANNOT_TELL,
    SAME,
    WORSE,
    Answer,
    Question,
    judge,
    overall,
    starts_to_decide,
)

__all__ = [
    "BETTER", "CANNOT_TELL", "METRICS", "REGRESSION", "SAME", "WORSE", "Cell", "Comparison", "Metric", "Primary",
    "RegressionPolicy", "Side", "Tolerance", "cell_value", "compare", "find_results", "last_before",
    "last_before_driver_change", "load_result", "repeat_values", "starts_to_decide",
]

#: The regression verdict under its older name.
REGRESSION = WORSE
DASH = "–"
METRIC_NAMES = tuple(metric.name for metric in METRICS)


@dataclass(frozen=True)
class Cell:
    """One row: a metric of one cell, before and after, and what it means."""

    concurrency: int
    input_tokens: int
    metric: Metric
    before: float | None  # geometric mean of the start values (each: the geometric mean of its repeats)
    after: float | None
    change_percent: float | None  # after / before - 1, in %, signed: the change the verdict tests
    noise_percent: float | None  # twice one start's spread: where one more start may land; None: not tested
    tolerance_percent: float | None  # None: shown, not judged
    verdict: str  # better | worse (regression) | same | cannot tell | "" (not judged)
    note: str = ""
    kind: CellKind = COMPLETIONS  # how the cell's requests were sent (completions, chat with thinking on...)
    before_repeats: tuple[float, ...] = ()  # every repeat of every start, in start order
    after_repeats: tuple[float, ...] = ()
    p_value: float | None = None  # of "the change lies within the tolerance"
    drift_percent: float | None = None  # the largest move of a later before-start from the first (shown only)
    starts_to_decide: int | None = None  # cannot tell: starts a side that resolve the tolerance at this spread
    primary: bool = False
    before_starts: tuple[float, ...] = ()  # one value per engine start: what the verdict compares
    after_starts: tuple[float, ...] = ()
    interval_percent: tuple[float, float] | None = None  # the change's interval at interval_level
    interval_level: float | None = None
    spread: float | None = None  # start-to-start sd of log start values (Welch.sd); None: not tested
    resolution: Resolution | None = None  # what these starts resolve at that spread (None: not tested)
    set_aside: str = ""  # the one-bad-start rule's words when it set a start aside

    @property
    def repeats_to_decide(self) -> int | None:
        """The older name of ``starts_to_decide``."""
        return self.starts_to_decide

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
        """decode C=1 in=128: 31.2 → 18.8 tok/s (-39.7 %; 97.5 % interval -45.1 … -33.8 % past tolerance 5 % …)."""
        where = f"{self.metric.label} {self.where}"
        if self.before is None or self.after is None:
            values = f"{_num(self.before)} → {_num(self.after)} {self.metric.unit}"
            return f"{where}: {values} ({self.note or 'not comparable'})"
        values = f"{self.before:.1f} → {self.after:.1f} {self.metric.unit}"
        change = DASH if self.change_percent is None else f"{self.change_percent:+.1f} %"
        return f"{where}: {values} ({change}; {self.note if self.verdict else 'not judged'})"


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
        """One line for logs and fleet tables; a ``cannot tell`` says what the starts resolve."""
        cell = self.deciding_cell()
        line = f"{self.verdict}: " + (cell.describe() if cell else "no cells to compare")
        seen = self.resolution()
        if self.verdict == CANNOT_TELL and seen is not None and seen.describe() not in line:
            line += f"; primary's resolution: {seen.describe()}"
        return line

    def resolution(self) -> Resolution | None:
        """What the primary row's starts resolve at its measured spread (the deciding row's without a primary)."""
        row = next((cell for cell in self.cells if cell.primary), None) or self.deciding_cell()
        return row.resolution if row is not None else None


def _num(value: float | None) -> str:
    return DASH if value is None else f"{value:.1f}"


def _cells_by_key(result: Mapping[str, Any]) -> dict[tuple[CellKind, int, int], Mapping[str, Any]]:
    """Every cell of a result, ok or failed, by (kind, concurrency, input tokens): a chat cell is never
    compared with a completion cell of the same size (a result without kinds holds completion cells only)."""
    return {(CellKind.of(cell), cell["concurrency"], cell["input_tokens"]): cell for cell in result.get("cells", [])}


def spread_percent(values: list[float]) -> float | None:
    """(max - min) / median in %, None with fewer than two values."""
    if len(values) < 2:
        return None
    ordered = sorted(values)
    middle = (ordered[(len(values) - 1) // 2] + ordered[len(values) // 2]) / 2
    return 0.0 if middle == 0 else (max(values) - min(values)) / abs(middle) * 100


def drift_percent(first: Mapping[str, Any] | None, again: Mapping[str, Any] | None, metric: Metric) -> float | None:
    """How far a later start moved from the first one (signed %, start values), None unless both measured."""
    if not first or not again or first.get("status") != "ok" or again.get("status") != "ok":
        return None
    old, new = cell_value(first, metric), cell_value(again, metric)
    return None if not old or new is None or not math.isfinite(old * new) else (new - old) / old * 100


def _ok(cells: Sequence[Mapping[str, Any] | None]) -> list[Mapping[str, Any]]:
    return [cell for cell in cells if cell is not None and cell.get("status") == "ok"]


def _starts(cells: Sequence[Mapping[str, Any] | None], metric: Metric) -> tuple[float, ...]:
    """One value per start whose cell measured the metric."""
    values = (start_value(cell, metric) for cell in _ok(cells))
    return tuple(value for value in values if value is not None)


def _repeats(cells: Sequence[Mapping[str, Any] | None], metric: Metric) -> tuple[float, ...]:
    return tuple(value for cell in _ok(cells) for value in (repeat_values(cell, metric) or
                                                             [v for v in [start_value(cell, metric)] if v is not None]))


def _geometric_mean(values: tuple[float, ...]) -> float | None:
    """Of positive finite values; the plain mean otherwise (shown only: the verdict refuses such values)."""
    if not values:
        return None
    if all(math.isfinite(value) and value > 0 for value in values):
        return geometric_mean(values)
    return math.fsum(values) / len(values)


def compare_cell(key: tuple[CellKind, int, int], before: Sequence[Mapping[str, Any] | None],
                 after: Sequence[Mapping[str, Any] | None], metric: Metric, policy: RegressionPolicy) -> Cell:
    """One row before its verdict (``compare`` judges the judged rows together): the cell of each start of
    each side (None where a start lacks it). A cell that measured before but failed or vanished after in any
    start is a regression if judged."""
    kind, concurrency, input_tokens = key
    tolerance = policy.tolerance(metric.name, concurrency, input_tokens)
    primary = policy.primary is not None and policy.primary.names(key, metric.name)
    starts_before, starts_after = _starts(before, metric), _starts(after, metric)
    repeats_before, repeats_after = _repeats(before, metric), _repeats(after, metric)
    old, new = _geometric_mean(starts_before), _geometric_mean(starts_after)
    lost_in = len(after) - len(_ok(after))
    if not starts_before or not starts_after or (lost_in and tolerance is not None):
        lost = bool(starts_before) and tolerance is not None
        note = "failed or missing before"
        if starts_before:
            note = "failed or missing after" + (f" in {lost_in} of {len(after)} starts" if len(after) > 1 else "")
        return Cell(concurrency, input_tokens, metric, old, new, None, None, tolerance, WORSE if lost else "", note,
                    kind, repeats_before, repeats_after, primary=primary, before_starts=starts_before,
                    after_starts=starts_after)
    change = None if not old or new is None or not math.isfinite(new / old) else (new / old - 1) * 100
    drifts = [drift for drift in (drift_percent(before[0], again, metric) for again in before[1:]) if drift is not None]
    drift = max(drifts, key=abs) if drifts else None  # shown: how far the before side's starts moved apart
    return Cell(concurrency, input_tokens, metric, old, new, change, None, tolerance, "", "", kind,
                repeats_before, repeats_after, drift_percent=drift, primary=primary, before_starts=starts_before,
                after_starts=starts_after)


def _judged(row: Cell, answer: Answer) -> Cell:
    return replace(row, verdict=answer.verdict, note=answer.why, noise_percent=answer.noise_percent,
                   p_value=answer.p_value, starts_to_decide=answer.starts_to_decide,
                   interval_percent=answer.interval_percent, interval_level=answer.interval_level,
                   spread=answer.spread, resolution=answer.resolution, set_aside=answer.set_aside)


def compare(before: Side, after: Side, policy: RegressionPolicy,
            before_again: Sequence[Mapping[str, Any]] = ()) -> Comparison:
    """Compare two sides (results as loaded by ``load_result``) under the profile's policy.

    + before: the baseline: one result per engine start (a single result is one start), e.g. the k starts
      measured before a driver update, or the tournament's starting recipe's starts
    + after: the side to judge, one result per engine start
    + policy: ``RegressionPolicy.from_profile(profile)``
    + before_again: more starts of the baseline (the older way to pass them): added to ``before``
    """
    starts_before = (*as_starts(before), *as_starts(before_again))
    starts_after = as_starts(after)
    cells_before = [_cells_by_key(start) for start in starts_before]
    cells_after = [_cells_by_key(start) for start in starts_after]
    # Completion cells first, then each other kind; by concurrency and input length within a kind.
    keys = sorted({key for cells in (*cells_before, *cells_after) for key in cells},
                  key=lambda key: (*key[0].order, key[1], key[2]))
    rows = [compare_cell(key, [cells.get(key) for cells in cells_before], [cells.get(key) for cells in cells_after],
                         metric, policy)
            for key in keys for metric in METRICS]
    judged = [index for index, row in enumerate(rows) if row.tolerance_percent is not None and not row.verdict
              and row.before_starts and row.after_starts]
    questions = [Question(rows[index].before_starts, rows[index].after_starts, rows[index].metric.higher_is_better,
                          rows[index].tolerance_percent or 0.0, rows[index].primary) for index in judged]
    aligned = all(len(rows[index].before_starts) == len(starts_before)
                  and len(rows[index].after_starts) == len(starts_after) for index in judged)
    answers = judge(questions, policy.false_claim_rate, aligned)
    for index, answer in zip(judged, answers, strict=True):
        rows[index] = _judged(rows[index], answer)
    metadata = [(side[0].get("metadata") or {}) if side else {} for side in (starts_before, starts_after)]
    return _verdict(metadata[0], metadata[1], tuple(rows), judged, answers)


def _verdict(before: Mapping[str, Any], after: Mapping[str, Any], rows: tuple[Cell, ...], judged: list[int],
             answers: list[Answer]) -> Comparison:
    """The rows' verdict: a lost judged cell or a worse row vetoes; else the primary's verdict (rigforge.updates.
    verdict.overall); without a primary, same only when every judged row is."""
    lost = [index for index, row in enumerate(rows) if row.verdict == WORSE and index not in judged]
    if lost:
        return Comparison(before, after, rows, WORSE, lost[0])
    if not judged:
        return Comparison(before, after, rows, SAME, None)
    primary = next((position for position, index in enumerate(judged) if rows[index].primary), None)
    verdict, deciding = overall(answers, primary)
    return Comparison(before, after, rows, verdict, judged[deciding] if deciding is not None else None)
