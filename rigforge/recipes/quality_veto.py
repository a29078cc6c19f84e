"""Quality vetoes speed: a recipe whose answers moved past the profile's tolerance of the model's reference is
never ``better`` and never kept. Every engine start's pass of the recipe is read (rigforge/quality/over_starts.py
judges them: ``answers differ`` only when each start clears the tolerance and the A/A noise), and the starting
recipe's passes count as more A/A noise when it is the reference recipe.

A graded task score, where the profile has one, is read start by start beside the KLD (its paired test against
the reference's answers, rigforge/quality/tasks.py): a score that cannot tell in any start makes answers the KLD
calls the same ``cannot tell`` (so a faster recipe is not ``better`` on the KLD alone), and every verdict's detail
says the task score's line.

Example::

    judged = judge_trial(trial, trials, start="default")
    verdict = veto(judge_recipe(start_starts, trial, policy), judged)
    verdict.verdict                 # 'answers differ'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from rigforge.quality.judge import DIFFER, OFF, SAME_ANSWERS, UNKNOWN
from rigforge.quality.over_starts import StartsJudgement, against_of, judge_over_starts
from rigforge.quality.tasks import SAME as SCORE_SAME
from rigforge.updates.verdict import BETTER, CANNOT_TELL, SAME, WORSE

#: A verdict of its own for a recipe whose answers differ (a tournament never keeps it).
ANSWERS_DIFFER = "answers differ"


class Measured(Protocol):
    """What the veto reads of a trial (rigforge/recipes/report.py's Trial)."""

    recipe: str
    disqualified: str

    @property
    def starts(self) -> tuple[Mapping[str, Any], ...]: ...


def aa_starts(trials: Sequence[Measured], start: str) -> tuple[Mapping[str, Any], ...]:
    """The starting recipe's results whose pass was compared with its own reference: its A/A in this tournament
    (none when the start is not the reference recipe, or it was disqualified)."""
    trial = next((trial for trial in trials if trial.recipe == start and not trial.disqualified), None)
    if trial is None:
        return ()
    return tuple(result for result in trial.starts if against_of(result).get("reference_recipe") == start)


def start_starts(trials: Sequence[Measured], start: str) -> tuple[Mapping[str, Any], ...]:
    """The starting recipe's results (against an imported reference every recipe is judged relative to them)."""
    trial = next((trial for trial in trials if trial.recipe == start and not trial.disqualified), None)
    return () if trial is None else tuple(trial.starts)


def judge_trial(trial: Measured, trials: Sequence[Measured], start: str) -> StartsJudgement:
    """A recipe's answers over all its starts, against the noise its tournament measured (and, against an imported
    reference, relative to the starting recipe's), with its task score's paired test laid over them
    (``with_task_scores``)."""
    return with_task_scores(judge_over_starts(trial.starts, aa_starts(trials, start), start_starts(trials, start)),
                            trial.starts)


def with_task_scores(judged: StartsJudgement, starts: Sequence[Mapping[str, Any]]) -> StartsJudgement:
    """``judged`` with each start's task score against the reference's: "same" answers whose score cannot tell
    (or dropped) in a start become ``cannot tell``; the score's lines are added where the line lacks them.

    + judged: the KLD's judgement over the starts (``judge_over_starts``)
    + starts: the recipe's bench results, one per engine start
    """
    scores = [(number, task) for number, result in enumerate(starts, start=1)
              if (task := against_of(result).get("task_score"))]
    if judged.state == OFF or not scores:
        return judged
    said = "; ".join(task["line"] if len(starts) == 1 else f"start {number}: {task['line']}"
                     for number, task in scores if task["line"] not in judged.line)
    if judged.state == SAME_ANSWERS and any(task["state"] != SCORE_SAME for _, task in scores):
        return replace(judged, state=UNKNOWN, line=f"quality cannot tell: the KLD says {judged.line}, but {said}")
    return replace(judged, line=f"{judged.line}; {said}") if said else judged


def veto(verdict: Any, judged: StartsJudgement) -> Any:
    """A recipe's speed verdict (rigforge/recipes/report.py's RecipeVerdict) with its quality laid over it:
    answers that differ make it ``answers differ`` (``faster, answers differ (…)`` when speed said better); a
    ``better`` whose quality cannot tell becomes ``cannot tell``; a profile without the pass changes nothing.

    + verdict: the speed verdict over the recipe's starts
    + judged: its answers over the same starts (``judge_trial``)
    """
    if judged.state == OFF:
        return verdict
    if judged.state == DIFFER:
        speed = {BETTER: "faster", WORSE: "slower", SAME: "as fast", CANNOT_TELL: "speed cannot tell"}
        head = speed.get(verdict.verdict, verdict.verdict)
        return replace(verdict, verdict=ANSWERS_DIFFER, detail=f"{head}, {judged.line}; speed: {verdict.detail}")
    if verdict.verdict == BETTER and judged.state == UNKNOWN:
        return replace(verdict, verdict=CANNOT_TELL, detail=f"faster, but {judged.line}; speed: {verdict.detail}")
    return replace(verdict, detail=f"{verdict.detail}; {judged.line}")


def quality_json(judged: StartsJudgement, trial: Measured) -> dict[str, Any] | None:
    """A recipe's ``quality`` in report.json: the judgement, the median and each start's mean KLD, the noise and
    tolerance it was judged against, the reference used, and each start's comparison whole (None: no pass)."""
    if judged.state == OFF:
        return None
    return {"state": judged.state, "line": judged.line, "mean_kld": judged.mean_kld,
            "mean_kld_per_start": list(judged.per_start), "noise_kld": judged.noise_kld,
            "tolerance": judged.tolerance, "reference": judged.reference,
            "starts": [dict(against_of(result)) or None for result in trial.starts]}


def quality_lines(trials: Sequence[Measured], start: str) -> list[str]:
    """The report's quality section: the reference each verdict used, then each recipe's answers over its starts
    (the line the veto decided on, whole); [] when no recipe ran a pass."""
    judged = {trial.recipe: judge_trial(trial, trials, start) for trial in trials if not trial.disqualified}
    if all(judgement.state == OFF for judgement in judged.values()):
        return []
    references = sorted({judgement.reference for judgement in judged.values() if judgement.reference})
    lines = [f"- reference: {reference}" for reference in references] or ["- reference: none yet"]
    for recipe, judgement in judged.items():
        role = " (the start; its passes are A/A of the reference)" if recipe == start and aa_starts(trials, start) \
            else ""
        lines.append(f"- **{recipe}**{role}: {judgement.line}")
    return lines
