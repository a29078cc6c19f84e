"""A Comparison as a markdown table and a PNG (before/after bars of the geometric means over the engine starts,
whiskers over every repeat of every start).

The table shows, per row, the statistic the verdict decided on: the change of the geometric means of the start
values with its interval (at the level named: 97.5 % for a claim on the primary at the default 5 %, 90 % for
``same``), how many starts a side it rests on, and the p of "the change lies within the tolerance".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rigforge.bench.config import COMPLETIONS
from rigforge.updates.comparison import BETTER, METRICS, WORSE, Cell, Comparison

DASH = "–"
VERSION_KEYS = ("driver_version", "cuda_driver_version", "kernel", "recipe", "image", "engine_package",
                "model_revision", "profile_hash")
HEADER = "| C | in | metric | starts | before | after | change | interval | p | noise | tolerance | verdict |"


def _fmt(value: float | None, suffix: str = "", digits: int = 1, signed: bool = False) -> str:
    if value is None:
        return DASH
    return f"{value:{'+' if signed else ''}.{digits}f}{suffix}"


def version_lines(before: dict[str, Any] | Any, after: dict[str, Any] | Any) -> list[str]:
    """One line per recorded version, marking the ones that changed."""
    lines = []
    for key in VERSION_KEYS:
        old, new = before.get(key), after.get(key)
        if old is None and new is None:
            continue
        lines.append(f"- {key}: {old} → {new}" + ("" if old == new else "  (changed)"))
    return lines


def _kind(cell: Cell) -> str:
    """`` (chat, thinking on)`` after the concurrency of a cell other than a completion cell."""
    return "" if cell.kind == COMPLETIONS else f" ({cell.kind.label})"


def _p(value: float | None) -> str:
    return DASH if value is None else f"{value:.2g}"


def _interval(cell: Cell) -> str:
    """``-24.1 … -15.2 % (97.5 %)``, or a dash where no interval was computed."""
    if cell.interval_percent is None or cell.interval_level is None:
        return DASH
    low, high = cell.interval_percent
    return f"{low:+.1f} … {high:+.1f} % ({cell.interval_level * 100:g} %)"


def render_markdown(comparison: Comparison) -> str:
    """Versions before → after, one row per (cell, metric), and the verdict with its deciding row."""
    lines = ["## Bench comparison: " + comparison.verdict.upper(), ""]
    lines += version_lines(comparison.before_metadata, comparison.after_metadata)
    lines += ["", HEADER, "|" + "---|" * (HEADER.count("|") - 1)]
    for cell in comparison.cells:
        noise = DASH if cell.noise_percent is None else f"±{cell.noise_percent:.1f} %"
        primary = " (primary)" if cell.primary else ""
        lines.append(
            f"| {cell.concurrency}{_kind(cell)} | {cell.input_tokens} | {cell.metric.label} {cell.metric.unit} "
            f"| {len(cell.before_starts)} / {len(cell.after_starts)} "
            f"| {_fmt(cell.before)} | {_fmt(cell.after)} | {_fmt(cell.change_percent, ' %', signed=True)} "
            f"| {_interval(cell)} | {_p(cell.p_value)} | {noise} | {_fmt(cell.tolerance_percent, ' %', 0)} "
            f"| {cell.verdict or 'not judged'}{primary}{': ' + cell.note if cell.note else ''} |"
        )
    lines += ["", comparison.summary()]
    return "\n".join(lines) + "\n"


def render_plot(comparison: Comparison, png: Path) -> Path:
    """One panel per metric: before and after bars per cell; error bars span the repeats' range."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # Agg: no display needed on the controller
    from matplotlib.figure import Figure

    figure = Figure(figsize=(13, 7), dpi=100)
    FigureCanvasAgg(figure)
    panels = figure.subplots(2, 3).flatten()
    for axes, metric in zip(panels, METRICS, strict=True):
        rows = [cell for cell in comparison.cells if cell.metric.name == metric.name]
        labels = [f"C={cell.concurrency}\nin={cell.input_tokens}\n{cell.kind.label}" if cell.kind != COMPLETIONS
                  else f"C={cell.concurrency}\nin={cell.input_tokens}" for cell in rows]
        positions = list(range(len(rows)))
        for offset, side, color in ((-0.2, "before", "tab:gray"), (0.2, "after", "tab:blue")):
            values = [getattr(cell, side) or 0.0 for cell in rows]
            repeats = [getattr(cell, f"{side}_repeats") or (value,) for cell, value in zip(rows, values, strict=True)]
            whiskers = [[value - min(each) for value, each in zip(values, repeats, strict=True)],
                        [max(each) - value for value, each in zip(values, repeats, strict=True)]]
            axes.bar([p + offset for p in positions], values, width=0.4, label=side, color=color, yerr=whiskers,
                     capsize=3)
        for position, cell in zip(positions, rows, strict=True):
            if cell.verdict in (WORSE, BETTER):
                axes.annotate(cell.verdict, (position, cell.after or 0.0), ha="center",
                              color="tab:red" if cell.verdict == WORSE else "tab:green")
        axes.set_xticks(positions, labels)
        axes.set_title(f"{metric.label} ({metric.unit}, {'higher' if metric.higher_is_better else 'lower'} is better)")
        axes.grid(True, axis="y", alpha=0.3)
    panels[0].legend()
    old = comparison.before_metadata.get("driver_version")
    new = comparison.after_metadata.get("driver_version")
    host = comparison.after_metadata.get("host", "")
    figure.suptitle(f"{host} driver {old} → {new}: {comparison.verdict}".strip())
    figure.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    temp = png.with_name(png.name + ".tmp.png")
    figure.savefig(temp)
    temp.replace(png)
    return png
