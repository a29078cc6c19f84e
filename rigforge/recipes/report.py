"""A recipe experiment's report: each recipe tried, its verdict against the starting recipe, its claims beside
what the rig measured, and why the disqualified ones were.

Pure functions of the trials (the results the bench wrote, as ``results/<host>/<stamp>/result.json`` holds
them, one per engine start); ``rigforge.recipes.plot`` draws the PNG. The verdict of a recipe against the starting
one is the driver update's comparison (rigforge/updates/comparison.py) of one value per engine start a side, under
the profile's ``bench.regression_tolerance``: the start-to-start spread decides, and one start a side cannot tell.

Example::

    report = build_report(trials, start="wiki", policy=RegressionPolicy.from_profile(profile))
    print("\\n".join(report_table(report)))
    best = report.best            # the recipe judged better than the start on the primary metric, or None
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from rigforge.recipes.cells import (
    DASH,
    Key,
    _fmt,
    cell_key,
    decode_c1,
    measured_value,
    metric,
    over_starts,
    primary_label,
    primary_value,
    where,
)
from rigforge.recipes.quality_veto import ANSWERS_DIFFER, judge_trial, quality_json, quality_lines, veto
from rigforge.recipes.report_claims import claim_cell, claims_table, image_line, wrong_output
from rigforge.updates.comparison import Comparison, RegressionPolicy, compare
from rigforge.updates.verdict import BETTER, CANNOT_TELL, SAME, WORSE

START, DISQUALIFIED = "start", "disqualified"
#: Older names of the verdicts (rigforge.updates.verdict has them all).
SLOWER, NOT_BETTER = WORSE, CANNOT_TELL
#: What a recipe can be called in the report.
RECIPE_VERDICTS = (START, BETTER, WORSE, SAME, CANNOT_TELL, ANSWERS_DIFFER, DISQUALIFIED)
__all__ = ["DASH", "Key", "RECIPE_VERDICTS", "Report", "Trial", "cell_key", "claim_cell", "claims_table", "decode_c1",
           "image_line", "measured_value", "metric", "where", "wrong_output"]
#: The two numbers the table shows per cell.
TABLE_METRICS = ("decode_tps_per_user", "output_tps")


@dataclass(frozen=True)
class Trial:
    """One recipe tried: its result (None when it never measured) or why it was disqualified.

    + recipe / description / source: from the profile
    + result: the bench result (result.json) of its measurement, None if it never measured
    + run_dir: where that result lives on the controller
    + disqualified: why it was disqualified ("" when it was not)
    + claims: the recipe's published claims (``Claim`` as plain data)
    + image: the image the recipe ran (its tag; None for a native engine or one that never got its image)
    + image_git_refs: the git refs that image was built from: build arg -> repository, ref as named, commit
    """

    recipe: str
    description: str
    source: str
    result: Mapping[str, Any] | None = None
    run_dir: str | None = None
    disqualified: str = ""
    claims: tuple[Mapping[str, Any], ...] = ()
    image: str | None = None
    image_git_refs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    later: tuple[Mapping[str, Any], ...] = ()  # the results of its later engine starts (rounds 2..k, extra ones)

    @property
    def starts(self) -> tuple[Mapping[str, Any], ...]:
        """Every start's result, in the order measured (empty when it never measured)."""
        return (self.result, *self.later) if self.result is not None else ()


@dataclass(frozen=True)
class RecipeVerdict:
    """A recipe's standing against the starting recipe, with the line that decided it."""

    recipe: str
    verdict: str
    detail: str
    decode_c1: float | None = None
    primary: float | None = None  # the primary metric's median in the primary cell
    starts_to_decide: int | None = None  # cannot tell: about how many starts a side would resolve the tolerance
    confirmed: bool = False  # better: judged better again in k new starts a side (roles/recipes_decide.confirm_best)
    resolution: str = ""  # what the starts resolve on the primary at the spread measured (rigforge.updates.resolution)
    set_aside: str = ""  # the start the one-bad-start rule set aside, said (rigforge.updates.robust)

    @property
    def label(self) -> str:
        """The verdict as the report shows it: a ``better`` that was not measured again says so."""
        if self.verdict != BETTER:
            return self.verdict
        return f"{BETTER} (confirmed)" if self.confirmed else f"{BETTER}, unconfirmed"


@dataclass(frozen=True)
class Report:
    trials: tuple[Trial, ...]
    start: str
    verdicts: tuple[RecipeVerdict, ...]
    best: str | None
    cells: tuple[Key, ...] = field(default=())
    primary: str = ""  # "decode C=1 in=128" (the profile's bench.primary)
    spent: tuple[str, ...] = ()  # what more starts were measured where a verdict could not tell, and their cost
    rounds: tuple[tuple[str, ...], ...] = ()  # the recipes of each round, in the order measured
    per_start: tuple[tuple[str, tuple[float | None, ...]], ...] = ()  # recipe -> its primary in each start

    @property
    def passed(self) -> tuple[str, ...]:
        """The recipes that measured without being disqualified."""
        return tuple(trial.recipe for trial in self.trials if trial.result is not None and not trial.disqualified)


def judge_recipe(start: Sequence[Mapping[str, Any]], trial: Trial, policy: RegressionPolicy) -> RecipeVerdict:
    """The verdict of one measured recipe against the starting recipe, one value per engine start a side."""
    assert trial.result is not None
    comparison: Comparison = compare(list(start), list(trial.starts), policy)
    primary = next((row for row in comparison.cells if row.primary), None)
    deciding = comparison.deciding_cell()
    detail = deciding.describe() if deciding else "no judged cell to compare"
    seen = comparison.resolution()
    said = seen.describe() if seen is not None else ""
    if comparison.verdict == CANNOT_TELL and deciding and deciding.verdict == BETTER and not deciding.primary:
        detail = ("a judged metric other than the primary moved past its tolerance (only the primary makes better, "
                  f"and this is not same): {detail}")
    if comparison.verdict == CANNOT_TELL and said and said not in detail:
        detail += f"; primary's resolution: {said}"
    return RecipeVerdict(trial.recipe, comparison.verdict, detail, decode_c1(trial.result),
                         primary_value(trial.starts, policy), primary.starts_to_decide if primary else None,
                         resolution=said, set_aside=deciding.set_aside if deciding else "")


def confirm(report: Report, recipe: str, line: str) -> Report:
    """The report with ``recipe``'s ``better`` marked confirmed (judged better again in new starts) and ``line``
    added to what was spent.

    + report: the tournament's report
    + recipe: the recipe judged better again
    + line: what the confirmation measured and found
    """
    verdicts = tuple(replace(verdict, confirmed=True) if verdict.recipe == recipe and verdict.verdict == BETTER
                     else verdict for verdict in report.verdicts)
    return replace(report, verdicts=verdicts, spent=(*report.spent, line))


def best_of(verdicts: Sequence[RecipeVerdict], policy: RegressionPolicy) -> str | None:
    """The recipe judged ``better`` with the best primary number, None when none is."""
    better = [verdict for verdict in verdicts if verdict.verdict == BETTER and verdict.primary is not None]
    higher = policy.primary is None or metric(policy.primary.metric).higher_is_better
    return max(better, key=lambda verdict: (verdict.primary or 0.0) * (1 if higher else -1)).recipe if better else None


def build_report(trials: Sequence[Trial], start: str, policy: RegressionPolicy, spent: Sequence[str] = (),
                 rounds: Sequence[Sequence[str]] = ()) -> Report:
    """Every trial judged against the starting recipe's runs; the best is the recipe judged ``better`` with the
    best primary number (only the primary metric can make a recipe better).

    + trials: the recipes tried, the start among them
    + start: the starting recipe's name
    + policy: ``RegressionPolicy.from_profile(profile)``
    + spent: what more starts were measured where a verdict could not tell (lines for the report)
    + rounds: the recipes of each round in the order measured (roles/recipes.py)
    """
    by_name = {trial.recipe: trial for trial in trials}
    start_starts = by_name[start].starts if start in by_name and not by_name[start].disqualified else ()
    verdicts = []
    for trial in trials:
        if trial.disqualified:
            verdicts.append(RecipeVerdict(trial.recipe, DISQUALIFIED, trial.disqualified))
        elif trial.recipe == start:
            verdicts.append(RecipeVerdict(trial.recipe, START, "the recipe the rig started on",
                                          decode_c1(trial.result or {}), primary_value(trial.starts, policy)))
        elif not start_starts:
            verdicts.append(RecipeVerdict(trial.recipe, CANNOT_TELL, "no measured starting recipe to compare with",
                                          decode_c1(trial.result or {})))
        else:
            verdicts.append(veto(judge_recipe(start_starts, trial, policy), judge_trial(trial, trials, start)))
    best = best_of(verdicts, policy)
    cells = sorted({cell_key(cell) for trial in trials if trial.result for cell in trial.result.get("cells", [])},
                   key=lambda key: (*key[0].order, key[1], key[2]))
    per_start = tuple((trial.recipe, tuple(primary_value([result], policy) for result in trial.starts))
                      for trial in trials)
    return Report(tuple(trials), start, tuple(verdicts), best, tuple(cells), primary_label(policy), tuple(spent),
                  tuple(tuple(names) for names in rounds), per_start)


def starts_lines(report: Report) -> list[str]:
    """The rounds as measured and each recipe's primary in each of its starts: the spread the verdicts weigh."""
    lines = [f"- round {number}: {' '.join(names)}" for number, names in enumerate(report.rounds, start=1)]
    for recipe, values in report.per_start:
        if values:
            lines.append(f"- {recipe}: {report.primary or 'primary'} per start: " + ", ".join(map(_fmt, values)))
    return lines


def resolution_lines(report: Report) -> list[str]:
    """What each comparison's starts resolve on the primary, the starts set aside, and the better ones not
    measured again: every better the report shows is confirmed or says it is not."""
    lines = [f"- {verdict.recipe}: {verdict.resolution}" for verdict in report.verdicts if verdict.resolution]
    lines += [f"- {verdict.recipe}: {verdict.set_aside}" for verdict in report.verdicts if verdict.set_aside]
    lines += [f"- {verdict.recipe}: better, unconfirmed: only the best recipe judged better is measured again "
              "(roles/recipes_decide.confirm_best); keep=best never moves the rig to an unconfirmed one"
              for verdict in report.verdicts if verdict.verdict == BETTER and not verdict.confirmed]
    return ["", "## What the starts resolve", ""] + lines if lines else []


def report_table(report: Report) -> list[str]:
    """Recipes × cells (decode tok/s per user / output tok/s, the median over a recipe's starts of each start's
    value) and each one's verdict."""
    heads = [where(key) for key in report.cells]
    lines = ["| recipe | " + " | ".join(heads) + " | verdict against " + report.start + " |",
             "|---|" + "---|" * len(heads) + "---|"]
    verdicts = {verdict.recipe: verdict for verdict in report.verdicts}
    for trial in report.trials:
        values = [" / ".join(_fmt(over_starts(trial.starts, name, key)) for name in TABLE_METRICS)
                  for key in report.cells]
        verdict = verdicts[trial.recipe]
        why = f"{verdict.label}: {short(verdict.detail)}" if verdict.verdict != START else START
        lines.append(f"| {trial.recipe} | " + " | ".join(values) + f" | {why.replace('|', '/')} |")
    return lines


def short(reason: str, width: int = 110) -> str:
    """A reason without its fix and quoted log line, for a table cell (the report lists it whole).

    >>> short("did not come up: known failure x (fail): it broke; fix: do y (journal: ...)")
    'did not come up: known failure x (fail): it broke'
    """
    for cut in ("; fix:", " (journal:"):
        reason = reason.split(cut, 1)[0]
    return reason if len(reason) <= width else reason[: width - 1] + "…"


def report_markdown(report: Report, host: str, stamp: str) -> str:
    """The whole report: the table, the claims, the disqualified ones with why, the best recipe."""
    lines = [f"# Recipe experiment on {host}, {stamp}", "", f"Started on **{report.start}**; each recipe measured "
             "in its own engine starts (interleaved rounds), the median over its starts of each start's value (the "
             "geometric mean of its repeats), decode tok/s per user / output tok/s. Verdicts "
             "(docs/bench.md#verdicts) compare one value per start: better only on the primary metric "
             f"({report.primary or 'none declared'}), its whole interval past its tolerance, and confirmed in new "
             "starts or labelled unconfirmed; worse (regression) on any judged metric the same way; same when every "
             "judged metric is surely inside its tolerance; cannot tell otherwise, with what the starts resolve.", ""]
    lines += report_table(report)
    lines += resolution_lines(report)
    if report.per_start:
        lines += ["", "## Engine starts", ""] + starts_lines(report)
    if report.spent:
        lines += ["", "## More starts where a verdict could not tell", ""] + [f"- {line}" for line in report.spent]
    quality = quality_lines(report.trials, report.start)
    if quality:
        lines += ["", "## Answers against the model's reference (every start's pass)", ""] + quality
    if any(trial.claims for trial in report.trials):
        lines += ["", "## Claimed beside measured", ""] + claims_table(report)
    lines += ["", "## Images", ""] + [f"- **{trial.recipe}**: {image_line(trial)}" for trial in report.trials]
    out = [trial for trial in report.trials if trial.disqualified]
    if out:
        lines += ["", "## Disqualified", ""] + [f"- **{trial.recipe}**: {trial.disqualified}" for trial in out]
    lines += ["", f"Best: {report.best or 'none judged better than ' + report.start}"]
    return "\n".join(lines) + "\n"


def report_json(report: Report, host: str, stamp: str) -> dict[str, Any]:
    """The report as data (report.json): trials with where their results are, verdicts, the best."""
    return {
        "host": host, "stamp": stamp, "start": report.start, "best": report.best, "primary": report.primary,
        "cells": [where(key) for key in report.cells], "more_starts": list(report.spent),
        "rounds": [list(names) for names in report.rounds],
        "recipes": [{"recipe": trial.recipe, "description": trial.description, "source": trial.source,
                     "run_dir": trial.run_dir, "disqualified": trial.disqualified or None,
                     "claims": [dict(claim) for claim in trial.claims],
                     "image": trial.image,
                     "image_git_refs": {arg: dict(ref) for arg, ref in trial.image_git_refs.items()},
                     "quality": quality_json(judge_trial(trial, report.trials, report.start), trial),
                     "measured": {where(key): {name: over_starts(trial.starts, name, key) for name in TABLE_METRICS}
                                  for key in report.cells},
                     "primary_per_start": list(dict(report.per_start).get(trial.recipe, ())),
                     **{key: value for key, value in asdict(verdict).items() if key != "recipe"}}
                    for trial, verdict in zip(report.trials, report.verdicts, strict=True)],
    }
