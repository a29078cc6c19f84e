"""A recipe experiment's report: each recipe tried, its verdict against the starting recipe, its claims beside
what the rig measured, and why the disqualified ones were.

Pure functions of the trials (the results the bench wrote, as ``results/<host>/<stamp>/result.json`` holds
them); ``rigforge.recipes.plot`` draws the PNG. The verdict of a recipe against the starting one is the driver
update's noise-aware comparison (rigforge/updates/comparison.py) under the profile's
``bench.regression_tolerance``, plus one question that comparison does not ask: is it *better* beyond the noise?

Example::

    report = build_report(trials, start="wiki", policy=RegressionPolicy.from_profile(profile))
    print("\\n".join(report_table(report)))
    best = report.best            # a recipe better beyond noise than the start, or None
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rigforge.bench.config import COMPLETIONS, CellKind
from rigforge.updates.comparison import (
    METRICS,
    REGRESSION,
    Comparison,
    Metric,
    RegressionPolicy,
    cell_value,
    compare,
    repeat_values,
)

#: A cell of a result: its kind (completions, chat…), concurrency and prompt length.
Key = tuple[CellKind, int, int]

START, BETTER, NOT_BETTER, SLOWER, DISQUALIFIED = (
    "start", "better beyond noise", "not better beyond noise", "slower (regression)", "disqualified")
#: The two numbers the table shows per cell.
TABLE_METRICS = ("decode_tps_per_user", "output_tps")
DASH = "–"


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


@dataclass(frozen=True)
class RecipeVerdict:
    """A recipe's standing against the starting recipe, with the line that decided it."""

    recipe: str
    verdict: str
    detail: str
    decode_c1: float | None = None


@dataclass(frozen=True)
class Report:
    trials: tuple[Trial, ...]
    start: str
    verdicts: tuple[RecipeVerdict, ...]
    best: str | None
    cells: tuple[Key, ...] = field(default=())

    @property
    def passed(self) -> tuple[str, ...]:
        """The recipes that measured without being disqualified."""
        return tuple(trial.recipe for trial in self.trials if trial.result is not None and not trial.disqualified)


def metric(name: str) -> Metric:
    return next(item for item in METRICS if item.name == name)


def cell_key(cell: Mapping[str, Any]) -> Key:
    return CellKind.of(dict(cell)), cell["concurrency"], cell["input_tokens"]


def where(key: Key) -> str:
    """``C=1 in=128``, or ``C=1 in=128 (chat, thinking off)`` for a cell of another kind."""
    kind, concurrency, input_tokens = key
    text = f"C={concurrency} in={input_tokens}"
    return text if kind == COMPLETIONS else f"{text} ({kind.label})"


def _cell(result: Mapping[str, Any], key: Key) -> Mapping[str, Any] | None:
    return next((cell for cell in result.get("cells", []) if cell_key(cell) == key and cell.get("status") == "ok"),
                None)


def improved_beyond_noise(before: Mapping[str, Any], after: Mapping[str, Any], judged: Metric) -> bool:
    """Every repeat after is better than every repeat before (at least two of each): a gain noise cannot make.

    >>> m = metric("decode_tps_per_user")
    >>> cell = lambda *v: {"repeats": [{"decode_tps_per_user": {"median": x}} for x in v]}
    >>> improved_beyond_noise(cell(30, 31), cell(35, 36), m), improved_beyond_noise(cell(30, 36), cell(35, 37), m)
    (True, False)
    """
    values_before, values_after = repeat_values(before, judged), repeat_values(after, judged)
    if len(values_before) < 2 or len(values_after) < 2:
        return False
    if judged.higher_is_better:
        return min(values_after) > max(values_before)
    return max(values_after) < min(values_before)


def judge_recipe(start: Mapping[str, Any], trial: Trial, policy: RegressionPolicy) -> RecipeVerdict:
    """The verdict of one measured recipe against the starting recipe's result."""
    assert trial.result is not None
    comparison: Comparison = compare(start, trial.result, policy)
    decode = decode_c1(trial.result)
    if comparison.verdict == REGRESSION:
        return RecipeVerdict(trial.recipe, SLOWER, comparison.summary(), decode)
    gains = []
    for row in comparison.cells:
        if row.tolerance_percent is None:
            continue
        key = (row.kind, row.concurrency, row.input_tokens)
        before, after = _cell(start, key), _cell(trial.result, key)
        if before and after and improved_beyond_noise(before, after, row.metric):
            gains.append(row)
    if gains:
        best_gain = max(gains, key=lambda row: -(row.worse_percent or 0.0))
        return RecipeVerdict(trial.recipe, BETTER, best_gain.describe(), decode)
    return RecipeVerdict(trial.recipe, NOT_BETTER, comparison.summary(), decode)


def decode_c1(result: Mapping[str, Any]) -> float | None:
    """Decode tok/s per user in the result's first cell (lowest concurrency, shortest prompt)."""
    cells = sorted((cell for cell in result.get("cells", [])
                    if cell.get("status") == "ok" and CellKind.of(cell) == COMPLETIONS),
                   key=lambda cell: (cell["concurrency"], cell["input_tokens"]))
    return cell_value(cells[0], metric("decode_tps_per_user")) if cells else None


def build_report(trials: Sequence[Trial], start: str, policy: RegressionPolicy) -> Report:
    """Every trial judged against the starting recipe's; the best is the fastest recipe better beyond noise."""
    by_name = {trial.recipe: trial for trial in trials}
    start_result = by_name[start].result if start in by_name and not by_name[start].disqualified else None
    verdicts = []
    for trial in trials:
        if trial.disqualified:
            verdicts.append(RecipeVerdict(trial.recipe, DISQUALIFIED, trial.disqualified))
        elif trial.recipe == start:
            verdicts.append(RecipeVerdict(trial.recipe, START, "the recipe the rig started on",
                                          decode_c1(trial.result or {})))
        elif start_result is None:
            verdicts.append(RecipeVerdict(trial.recipe, NOT_BETTER, "no measured starting recipe to compare with",
                                          decode_c1(trial.result or {})))
        else:
            verdicts.append(judge_recipe(start_result, trial, policy))
    better = [verdict for verdict in verdicts if verdict.verdict == BETTER]
    best = max(better, key=lambda verdict: verdict.decode_c1 or 0.0).recipe if better else None
    cells = sorted({cell_key(cell) for trial in trials if trial.result for cell in trial.result.get("cells", [])},
                   key=lambda key: (*key[0].order, key[1], key[2]))
    return Report(tuple(trials), start, tuple(verdicts), best, tuple(cells))


def _fmt(value: float | None) -> str:
    return DASH if value is None else f"{value:.1f}"


def measured_value(result: Mapping[str, Any] | None, name: str, key: Key) -> float | None:
    """The median over repeats of one metric in one cell of a result (None: not measured or failed)."""
    cell = _cell(result or {}, key)
    return cell_value(cell, metric(name)) if cell else None


def report_table(report: Report) -> list[str]:
    """Recipes × cells (decode tok/s per user / output tok/s, medians over repeats) and each one's verdict."""
    heads = [where(key) for key in report.cells]
    lines = ["| recipe | " + " | ".join(heads) + " | verdict against " + report.start + " |",
             "|---|" + "---|" * len(heads) + "---|"]
    verdicts = {verdict.recipe: verdict for verdict in report.verdicts}
    for trial in report.trials:
        values = [" / ".join(_fmt(measured_value(trial.result, name, key)) for name in TABLE_METRICS)
                  for key in report.cells]
        verdict = verdicts[trial.recipe]
        why = f"{verdict.verdict}: {short(verdict.detail)}" if verdict.verdict != START else START
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


def claim_cell(claim: Mapping[str, Any], cells: Sequence[Key]) -> Key | None:
    """The measured completion cell a claim is shown beside: same concurrency, its prompt length or the
    shortest measured."""
    same = sorted((key for key in cells if key[0] == COMPLETIONS and key[1] == claim["concurrency"]),
                  key=lambda key: key[2])
    wanted = claim.get("input_tokens")
    if wanted is not None:
        return next((key for key in same if key[2] == wanted), None)
    return same[0] if same else None


def claims_table(report: Report) -> list[str]:
    """Each published claim beside the rig's number in the same cell and metric."""
    lines = ["| recipe | claimed | how the source measured it | source | measured here | here / claimed |",
             "|---|---|---|---|---|---|"]
    for trial in report.trials:
        for claim in trial.claims:
            key = claim_cell(claim, report.cells)
            here = measured_value(trial.result, claim["metric"], key) if key else None
            label = metric(claim["metric"])
            cell = f"C={claim['concurrency']}" + (f" in={claim['input_tokens']}" if claim.get("input_tokens") else "")
            ratio = f"{here / claim['value']:.2f}" if here is not None and claim["value"] else DASH
            shown = f"{_fmt(here)} ({where(key)})" if key and here is not None else "not measured"
            lines.append(f"| {trial.recipe} | {claim['value']:g} {label.label} {label.unit} ({cell}) | "
                         f"{claim['measured']} | {claim['source']} | {shown} | {ratio} |")
    return lines


def report_markdown(report: Report, host: str, stamp: str) -> str:
    """The whole report: the table, the claims, the disqualified ones with why, the best recipe."""
    lines = [f"# Recipe experiment on {host}, {stamp}", "", f"Started on **{report.start}**; medians over the "
             "bench's repeats, decode tok/s per user / output tok/s. Verdicts: rigforge.updates.comparison under "
             "the profile's bench.regression_tolerance; better beyond noise = every repeat better.", ""]
    lines += report_table(report)
    if any(trial.claims for trial in report.trials):
        lines += ["", "## Claimed beside measured", ""] + claims_table(report)
    lines += ["", "## Images", ""] + [f"- **{trial.recipe}**: {image_line(trial)}" for trial in report.trials]
    out = [trial for trial in report.trials if trial.disqualified]
    if out:
        lines += ["", "## Disqualified", ""] + [f"- **{trial.recipe}**: {trial.disqualified}" for trial in out]
    lines += ["", f"Best: {report.best or 'none better beyond noise than ' + report.start}"]
    return "\n".join(lines) + "\n"


def image_line(trial: Trial) -> str:
    """The image a recipe ran and the commits its git refs resolved to.

    >>> image_line(Trial("wiki", "d", "s", image="rigforge/vllm:9a42", image_git_refs={"VLLM_REF": {
    ...     "repository": "https://github.com/vllm-project/vllm.git", "ref": "v0.19.1", "commit": "a" * 40}}))
    'rigforge/vllm:9a42 (VLLM_REF v0.19.1 = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa)'
    """
    if trial.image is None:
        return "no image (a native engine, or it never got one)"
    refs = ", ".join(f"{arg} {ref.get('ref')} = {ref.get('commit')}" for arg, ref in trial.image_git_refs.items())
    return trial.image + (f" ({refs})" if refs else "")


def report_json(report: Report, host: str, stamp: str) -> dict[str, Any]:
    """The report as data (report.json): trials with where their results are, verdicts, the best."""
    return {
        "host": host, "stamp": stamp, "start": report.start, "best": report.best,
        "cells": [where(key) for key in report.cells],
        "recipes": [{"recipe": trial.recipe, "description": trial.description, "source": trial.source,
                     "run_dir": trial.run_dir, "disqualified": trial.disqualified or None,
                     "claims": [dict(claim) for claim in trial.claims],
                     "image": trial.image,
                     "image_git_refs": {arg: dict(ref) for arg, ref in trial.image_git_refs.items()},
                     "measured": {where(key): {name: measured_value(trial.result, name, key) for name in TABLE_METRICS}
                                  for key in report.cells},
                     **{key: value for key, value in asdict(verdict).items() if key != "recipe"}}
                    for trial, verdict in zip(report.trials, report.verdicts, strict=True)],
    }


def wrong_output(result: dict[str, Any]) -> str:
    """Why a bench result is not a number to keep: a failed probe (wrong output), a failed cell or check; "" if none."""
    for probe in result.get("sanity", {}).get("probes", []):
        if not probe["passed"]:
            return f"wrong output: {probe['name']}: {probe['detail']}"
    failed = result.get("failed_checks") or []
    if failed:
        return f"failed checks: {', '.join(failed[:4])}"
    bad = [cell for cell in result.get("cells", []) if cell.get("status") != "ok"]
    if bad:
        return f"cell C={bad[0]['concurrency']} in={bad[0]['input_tokens']} failed: {bad[0].get('reason')}"
    return ""
