"""The tournament's trade-off chart (quality.png): each measured recipe's primary speed against its mean KLD from
the model's reference, with both spreads — speed whiskers over every repeat (the start's runs pooled), KLD
whiskers over the texts' own means — the tolerance as a vertical line and the reference's A/A noise shaded."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rigforge.recipes.cells import Key, repeats_of, where
from rigforge.recipes.plot import write_png
from rigforge.recipes.report import Report
from rigforge.updates.comparison import METRICS


def primary_of(report: Report) -> tuple[str, Key] | None:
    """The primary metric's name and cell, read back from the report's label (``decode C=1 in=128``)."""
    name = next((item.name for item in METRICS if report.primary.startswith(item.label + " ")), None)
    key = next((key for key in report.cells if report.primary.endswith(" " + where(key))), None)
    return (name, key) if name and key else None


def kld_point(result: Mapping[str, Any] | None) -> tuple[float, float, float] | None:
    """(mean KLD, how far below and above it the texts' means reach) of a result, None without a comparison.

    >>> kld_point({"quality": {"against_reference": {"mean_kld": 0.04, "text_kld": {"a": 0.03, "b": 0.05}}}})
    (0.04, 0.010000000000000002, 0.010000000000000002)
    """
    against = ((result or {}).get("quality") or {}).get("against_reference") or {}
    mean = against.get("mean_kld")
    if mean is None:
        return None
    texts = list((against.get("text_kld") or {}).values()) or [mean]
    return mean, max(0.0, mean - min(texts)), max(0.0, max(texts) - mean)


def render_quality_plot(report: Report, png: Path, title: str, tolerance: float | None = None) -> Path | None:
    """Primary speed (y) against mean KLD (x) per recipe; None (no file) when no recipe has both numbers.

    + report: the experiment's report
    + png: where to write it (written whole, then renamed)
    + title: the figure's title (host and stamp)
    + tolerance: the profile's ``bench.quality.max_mean_kld`` (drawn as a line; None: as the results say)
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # Agg: no display needed on the controller
    from matplotlib.figure import Figure

    primary = primary_of(report)
    verdicts = {verdict.recipe: verdict for verdict in report.verdicts}
    points = []
    for trial in report.trials:
        kld = kld_point(trial.result)
        speed = verdicts[trial.recipe].primary
        if primary is None or kld is None or speed is None or trial.disqualified:
            continue
        # The spread over its engine starts (the unit the verdict judges), or its repeats when it ran once.
        per_start = [value for value in dict(report.per_start).get(trial.recipe, ()) if value is not None]
        values = (per_start if len(per_start) > 1 else repeats_of(trial.result, primary[0], primary[1])) or [speed]
        points.append((trial.recipe, kld, speed, (speed - min(values), max(values) - speed)))
    if not points:
        return None
    figure = Figure(figsize=(8, 5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    for recipe, (mean, low, high), speed, (below, above) in points:
        axes.errorbar([mean], [speed], xerr=[[low], [high]], yerr=[[below], [above]], fmt="o", capsize=4,
                      label=f"{recipe} ({verdicts[recipe].verdict})")
    noise = next((((trial.result or {}).get("quality") or {}).get("against_reference") or {}).get("noise")
                 for trial in report.trials if trial.recipe == report.start)
    if noise and noise.get("mean_kld") is not None:
        axes.axvspan(0, 2 * noise["mean_kld"], color="grey", alpha=0.2, label="2x the reference's A/A noise")
    tolerance = tolerance if tolerance is not None else next(
        (against["tolerance"] for trial in report.trials
         if (against := ((trial.result or {}).get("quality") or {}).get("against_reference") or {}).get("tolerance")),
        None)
    if tolerance is not None:
        axes.axvline(tolerance, color="red", linestyle="--", label=f"tolerance {tolerance:g}")
    axes.set_xlabel("mean KLD from the reference (nats, top-k); whiskers: the texts' means")
    axes.set_ylabel(f"{report.primary}; whiskers: every repeat")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    figure.suptitle(title + ": speed against answers")
    return write_png(figure, png)
