"""The recipe experiment's PNG: per cell, each recipe's decode tok/s per user and output tok/s (median bars,
whiskers spanning every repeat of every engine start), claims marked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rigforge.recipes.cells import Key, over_starts, repeats_of
from rigforge.recipes.report import TABLE_METRICS, Report, claim_cell, metric, where


def spread(results: Sequence[Mapping[str, Any] | None], name: str, key: Key, middle: float) -> tuple[float, float]:
    """How far below and above ``middle`` the repeats of these runs reach (0, 0 without repeats).

    >>> run = {"cells": [{"concurrency": 1, "input_tokens": 128, "status": "ok",
    ...                   "repeats": [{"output_throughput": v} for v in (9.0, 12.0)]}]}
    >>> from rigforge.bench.config import COMPLETIONS
    >>> spread([run], "output_tps", (COMPLETIONS, 1, 128), 10.0)
    (1.0, 2.0)
    >>> spread([run], "output_tps", (COMPLETIONS, 1, 128), 12.5)
    (3.5, 0.0)
    """
    values = [value for result in results for value in repeats_of(result, name, key)]
    # max(0, …): the middle is a geometric mean, which can sit a rounding error past its only repeat.
    return (max(0.0, middle - min(values)), max(0.0, max(values) - middle)) if values else (0.0, 0.0)


def render_report_plot(report: Report, png: Path, title: str) -> Path:
    """Grouped bars (one group per cell, one bar per recipe that measured) with whiskers over the repeats, a black
    mark for each published claim.

    + report: the experiment's report
    + png: where to write it (written whole, then renamed)
    + title: the figure's title (host and stamp)
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # Agg: no display needed on the controller
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 5), dpi=100)
    FigureCanvasAgg(figure)
    panels = figure.subplots(1, len(TABLE_METRICS))
    measured = [trial for trial in report.trials if trial.result is not None and not trial.disqualified]
    width = 0.8 / max(len(measured), 1)
    for axes, name in zip(panels, TABLE_METRICS, strict=True):
        label = metric(name)
        for index, trial in enumerate(measured):
            xs = [cell + (index - (len(measured) - 1) / 2) * width for cell in range(len(report.cells))]
            values = [over_starts(trial.starts, name, key) or 0.0 for key in report.cells]
            runs = list(trial.starts)
            whiskers = [spread(runs, name, key, value) for key, value in zip(report.cells, values, strict=True)]
            axes.bar(xs, values, width=width, label=trial.recipe,
                     yerr=[[low for low, _ in whiskers], [high for _, high in whiskers]], capsize=3)
            for claim in (claim for claim in trial.claims if claim["metric"] == name):
                key = claim_cell(claim, report.cells)
                if key is not None:
                    axes.plot(xs[report.cells.index(key)], claim["value"], "k_", markersize=14)
        axes.set_xticks(range(len(report.cells)), [where(key).replace(" ", "\n", 1) for key in report.cells])
        axes.set_title(f"{label.label} ({label.unit}); whiskers: every repeat; black marks: claimed")
        axes.grid(True, axis="y", alpha=0.3)
    panels[0].legend(fontsize="small")
    out = ", ".join(trial.recipe for trial in report.trials if trial.disqualified)
    figure.suptitle(title + (f" — disqualified: {out}" if out else ""))
    return write_png(figure, png)


def write_png(figure: Any, png: Path) -> Path:
    """Lay out ``figure`` and write it to ``png`` whole (a temporary name, then renamed)."""
    figure.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    temporary = png.with_name(png.name + ".tmp.png")
    figure.savefig(temporary)
    temporary.replace(png)
    return png
