"""The recipe experiment's PNG: per cell, each recipe's decode tok/s per user and output tok/s, claims marked."""

from __future__ import annotations

from pathlib import Path

from rigforge.recipes.report import TABLE_METRICS, Report, claim_cell, measured_value, metric, where


def render_report_plot(report: Report, png: Path, title: str) -> Path:
    """Grouped bars (one group per cell, one bar per recipe that measured), a black mark for each published claim.

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
            values = [measured_value(trial.result, name, key) or 0.0 for key in report.cells]
            axes.bar(xs, values, width=width, label=trial.recipe)
            for claim in (claim for claim in trial.claims if claim["metric"] == name):
                key = claim_cell(claim, report.cells)
                if key is not None:
                    axes.plot(xs[report.cells.index(key)], claim["value"], "k_", markersize=14)
        axes.set_xticks(range(len(report.cells)), [where(key).replace(" ", "\n", 1) for key in report.cells])
        axes.set_title(f"{label.label} ({label.unit}); black marks: claimed")
        axes.grid(True, axis="y", alpha=0.3)
    panels[0].legend(fontsize="small")
    out = ", ".join(trial.recipe for trial in report.trials if trial.disqualified)
    figure.suptitle(title + (f" — disqualified: {out}" if out else ""))
    figure.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    temporary = png.with_name(png.name + ".tmp.png")
    figure.savefig(temporary)
    temporary.replace(png)
    return png
