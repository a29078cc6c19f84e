"""The parts of a recipe experiment's report that stand beside the verdicts: each published claim beside what the
rig measured in the same cell, the image a recipe ran, and why a result is not a number to keep.

Pure functions (rigforge.recipes.report assembles the report from them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from rigforge.bench.config import COMPLETIONS
from rigforge.recipes.cells import DASH, Key, _fmt, metric, over_starts, where


class Trial(Protocol):
    """What these parts read of a rigforge.recipes.report.Trial."""

    recipe: str
    claims: tuple[Mapping[str, Any], ...]
    image: str | None
    image_git_refs: Mapping[str, Mapping[str, Any]]

    @property
    def starts(self) -> tuple[Mapping[str, Any], ...]: ...


class Report(Protocol):
    """What these parts read of a rigforge.recipes.report.Report."""

    @property
    def trials(self) -> Sequence[Trial]: ...

    @property
    def cells(self) -> Sequence[Key]: ...


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
            here = over_starts(trial.starts, claim["metric"], key) if key else None
            label = metric(claim["metric"])
            cell = f"C={claim['concurrency']}" + (f" in={claim['input_tokens']}" if claim.get("input_tokens") else "")
            ratio = f"{here / claim['value']:.2f}" if here is not None and claim["value"] else DASH
            shown = f"{_fmt(here)} ({where(key)})" if key and here is not None else "not measured"
            lines.append(f"| {trial.recipe} | {claim['value']:g} {label.label} {label.unit} ({cell}) | "
                         f"{claim['measured']} | {claim['source']} | {shown} | {ratio} |")
    return lines


def image_line(trial: Trial) -> str:
    """The image a recipe ran and the commits its git refs resolved to.

    >>> from rigforge.recipes.report import Trial
    >>> image_line(Trial("wiki", "d", "s", image="rigforge/vllm:9a42", image_git_refs={"VLLM_REF": {
    ...     "repository": "https://github.com/vllm-project/vllm.git", "ref": "v0.19.1", "commit": "a" * 40}}))
    'rigforge/vllm:9a42 (VLLM_REF v0.19.1 = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa)'
    """
    if trial.image is None:
        return "no image (a native engine, or it never got one)"
    refs = ", ".join(f"{arg} {ref.get('ref')} = {ref.get('commit')}" for arg, ref in trial.image_git_refs.items())
    return trial.image + (f" ({refs})" if refs else "")


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
