"""The tournament's trade-off chart (quality.png): each measured recipe's primary speed against its mean KLD from
the model's reference, with both spreads over the unit the verdicts judge, the engine start — speed whiskers over
the recipe's starts (its repeats when it ran once), the KLD point the median of its starts' mean KLDs and its
whiskers their range (the texts' own means when it ran once) — the tolerance as a vertical line and twice the A/A
noise the veto used shaded (rigforge/quality/over_starts.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rigforge.quality.over_starts import StartsJudgement
from rigforge.recipes.cells import Key, repeats_of, where
from rigforge.recipes.plot import write_png
from rigforge.recipes.quality_veto import judge_trial
from rigforge.recipes.report import Report
from rigforge.updates.comparison import METRICS


def primary_of(report: Report) -> tuple[str, Key] | None:
    """The primary metric's name and cell, read back from the report's label (``decode C=1 in=128``)."""
    name = next((item.name for item in METRICS if report.primary.startswith(item.label + " ")), None)
    key = next((key for key in report.cells if report.primary.endswith(" " + where(key))), None)
    return (name, key) if name and key else None


def kld_point(result: Mapping[str, Any] | None) -> tuple[float, float, float] | None:
    """(mean KLD, how far below and above it the texts' means reach) of one start's result, None without a
    comparison.

    >>> kld_point({"quality": {"against_reference": {"mean_kld": 0.04, "text_kld": {"a": 0.03, "b": 0.05}}}})
    (0.04, 0.010000000000000002, 0.010000000000000002)
    """
    against = ((result or {}).get("quality") or {}).get("against_reference") or {}
    mean = against.get("mean_kld")
    if mean is None:
        return None
    texts = list((against.get("text_kld") or {}).values()) or [mean]
    return mean, max(0.0, mean - min(texts)), max(0.0, max(texts) - mean)


def kld_over_starts(judged: StartsJudgement, starts: Sequence[Mapping[str, Any]]) -> \
        tuple[float, float, float] | None:
    """(median of the starts' mean KLDs, how far below and above it the starts reach) — the texts' spread when
    only one start has a comparison; None when none has.

    >>> from rigforge.quality.over_starts import StartsJudgement
    >>> kld_over_starts(StartsJudgement("differ", "x", (0.04, 0.05, None, 0.045)), [])
    (0.045, 0.0049999999999999975, 0.0050000000000000044)
    """
    values = [value for value in judged.per_start if value is not None]
    if len(values) == 1:
        return next(point for result in starts if (point := kld_point(result)) is not None)
    median = judged.mean_kld
    return None if median is None else (median, median - min(values), max(values) - median)


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
    judged = {trial.recipe: judge_trial(trial, report.trials, report.start) for trial in report.trials
              if not trial.disqualified}
    for trial in report.trials:
        kld = kld_over_starts(judged[trial.recipe], trial.starts) if trial.recipe in judged else None
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
    noise = max((judgement.noise_kld for judgement in judged.values() if judgement.noise_kld is not None),
                default=None)
    if noise is not None:
        axes.axvspan(0, noise, color="grey", alpha=0.2, label="the A/A noise the veto used (its interval top)")
    if tolerance is None:
        tolerance = next((judgement.tolerance for judgement in judged.values() if judgement.tolerance is not None),
                         None)
    if tolerance is not None:
        axes.axvline(tolerance, color="red", linestyle="--", label=f"tolerance {tolerance:g}")
    axes.set_xlabel("mean KLD from the reference (nats, top-k): median of the starts, whiskers their range")
    axes.set_ylabel(f"{report.primary}; whiskers: the starts")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    figure.suptitle(title + ": speed against answers")
    return write_png(figure, png)
