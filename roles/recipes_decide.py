"""The recipe tournament's extra measurements — the start measured again (its drift), and more repeats of the
primary cell where a verdict could not tell, within the profile's ``bench.verdicts.decide_budget_s`` — and its
report files.

Called by roles/recipes.py while the experiment executes (nested operations); the pure parts (which cell, how
many repeats fit, merging them into a result) are plain functions.
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pyinfra import host, logger

from rigforge.bench.config import COMPLETIONS, CellKind
from rigforge.profile import Profile
from rigforge.recipes.plot import render_report_plot
from rigforge.recipes.quality_plot import render_quality_plot
from rigforge.recipes.report import Report, Trial, report_json, report_markdown
from rigforge.updates.verdict import CANNOT_TELL

#: A trial runner: (recipe profile, the recipe before it) -> the trial.
TryRecipe = Callable[[Profile, Profile | None], Trial]


@dataclass(frozen=True)
class Timed:
    """A trial and how long it took (switch, health wait, probes and bench), in seconds."""

    trial: Trial
    seconds: float


def timed(try_recipe: TryRecipe, profile: Profile, previous: Profile | None) -> Timed:
    """Run one trial and time it."""
    started = time.monotonic()
    trial = try_recipe(profile, previous)
    return Timed(trial, time.monotonic() - started)


def cost_line(again: list[Timed], recipes: list[Timed]) -> str:
    """What measuring the start again cost, beside one recipe's bench (the acceptance's yardstick).

    >>> t = lambda s: Timed(Trial("r", "d", "s"), s)
    >>> cost_line([t(50.0)], [t(60.0), t(40.0)])
    'the start measured again: 1 bench, 50 s in all; one recipe took 50 s on average'
    """
    spent = sum(item.seconds for item in again)
    mean = sum(item.seconds for item in recipes) / len(recipes) if recipes else math.nan
    return (f"the start measured again: {len(again)} bench{'es' if len(again) != 1 else ''}, {spent:.0f} s in all; "
            f"one recipe took {mean:.0f} s on average")


def primary_bench(profile: Profile, repeats: int) -> Profile:
    """``profile`` benching only its primary cell, ``repeats`` times (no floors, no extra cells): more repeats
    of the one number that decides, not a new verdict on the others (nor a new quality pass)."""
    primary = profile.bench.primary
    bench = profile.bench.model_copy(update={
        "concurrency": [primary.concurrency], "input_tokens": [primary.input_tokens], "repeats": repeats,
        "floors": [], "extra_cells": [], "quality": profile.bench.quality.model_copy(update={"enabled": False})})
    return profile.model_copy(update={"bench": bench})


def with_more_repeats(result: Mapping[str, Any], extra: Mapping[str, Any], key: tuple[int, int]) -> dict[str, Any]:
    """``result`` with the repeats of ``extra``'s cell ``key`` (concurrency, input tokens) added to its own.

    >>> cell = lambda *v: {"concurrency": 1, "input_tokens": 128, "status": "ok", "repeats": [{"x": x} for x in v]}
    >>> with_more_repeats({"cells": [cell(1, 2)]}, {"cells": [cell(3)]}, (1, 128))["cells"][0]["repeats"]
    [{'x': 1}, {'x': 2}, {'x': 3}]
    """
    merged = copy.deepcopy(dict(result))
    found = [cell for cell in extra.get("cells", []) if (cell["concurrency"], cell["input_tokens"]) == key
             and cell.get("status") == "ok" and CellKind.of(cell) == COMPLETIONS]
    for cell in merged.get("cells", []):
        if (cell["concurrency"], cell["input_tokens"]) == key and CellKind.of(cell) == COMPLETIONS and found:
            cell["repeats"] = [*(cell.get("repeats") or []), *(found[0].get("repeats") or [])]
    return merged


def affordable_repeats(wanted: int, budget_left: float, cell_seconds: float, switch_seconds: float) -> int:
    """How many of ``wanted`` repeats fit in what is left of the budget, after the switch to the recipe.

    >>> affordable_repeats(6, 60.0, 5.0, 20.0), affordable_repeats(6, 10.0, 5.0, 20.0)
    (5, 0)
    """
    per_repeat = cell_seconds * 1.5  # the window plus its warm-up and the client's start
    return max(0, min(wanted, int((budget_left - switch_seconds) // per_repeat)))


def decide_more(report: Report, trials: list[Trial], profile: Profile, switch_seconds: float,
                try_recipe: TryRecipe, previous: Profile | None) -> tuple[list[Trial], list[str], Profile | None]:
    """Measure more repeats of the primary cell for each recipe the report cannot tell about, while the
    profile's budget lasts; the trials with the repeats merged in, what was spent, and the rig's recipe now.

    + report: the report before more repeats
    + trials: its trials (the start first)
    + profile: the rig's profile, no recipe applied
    + switch_seconds: what a switch to a recipe and its health wait cost (measured on this run)
    + try_recipe: the runner of one trial
    + previous: the recipe the rig runs now
    """
    budget = float(profile.bench.verdicts.decide_budget_s)
    primary = profile.bench.primary
    verdicts = {verdict.recipe: verdict for verdict in report.verdicts}
    spent, lines, trials = 0.0, [], list(trials)
    for index, trial in enumerate(trials):
        verdict = verdicts[trial.recipe]
        if verdict.verdict != CANNOT_TELL or not verdict.repeats_to_decide or trial.result is None:
            continue
        have = profile.bench.repeats
        repeats = affordable_repeats(verdict.repeats_to_decide - have, budget - spent, profile.bench.cell_seconds,
                                     switch_seconds)
        if repeats < 1:
            lines.append(f"{trial.recipe}: about {verdict.repeats_to_decide} repeats a side would decide; "
                         f"{budget - spent:.0f} s of the budget left is too little")
            continue
        chosen = primary_bench(profile.with_recipe(trial.recipe), repeats)
        started = time.monotonic()
        extra = try_recipe(chosen, previous)
        took = time.monotonic() - started
        spent += took
        previous = chosen
        if extra.result is None or extra.disqualified:
            lines.append(f"{trial.recipe}: {repeats} more repeats failed ({extra.disqualified}), {took:.0f} s")
            continue
        merged = with_more_repeats(trial.result, extra.result, (primary.concurrency, primary.input_tokens))
        trials[index] = replace(trial, result=merged)
        lines.append(f"{trial.recipe}: {repeats} more repeats of C={primary.concurrency} in={primary.input_tokens}, "
                     f"{took:.0f} s")
        host.log(f"recipes: {trial.recipe}: {repeats} more repeats of the primary cell ({took:.0f} s)", logger.info)
    if lines:
        lines.append(f"spent {spent:.0f} s of the {budget:.0f} s budget (bench.verdicts.decide_budget_s)")
    return trials, lines, previous


def write_report(report: Any, folder: Path, host_name: str, stamp: str) -> Path:
    """report.json, report.md and report.png in ``folder`` (each written whole, then renamed)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("report.json", json.dumps(report_json(report, host_name, stamp), indent=1) + "\n"),
                       ("report.md", report_markdown(report, host_name, stamp))):
        temporary = folder / f".{name}.new"
        temporary.write_text(text)
        temporary.replace(folder / name)
    render_report_plot(report, folder / "report.png", f"{host_name} recipes {stamp}")
    render_quality_plot(report, folder / "quality.png", f"{host_name} recipes {stamp}")
    return folder
