"""Quality vetoes speed: a recipe whose answers moved past the profile's tolerance of the model's reference is
never ``better`` and never kept (rigforge/quality/judge.py judges the answers).

Example::

    verdict = veto(judge_recipe(start, trial, policy), trial.result)
    verdict.verdict                 # 'answers differ'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from rigforge.quality.judge import DIFFER, OFF, UNKNOWN, judge_quality
from rigforge.updates.verdict import BETTER, CANNOT_TELL, SAME, WORSE

#: A verdict of its own for a recipe whose answers differ (a tournament never keeps it).
ANSWERS_DIFFER = "answers differ"


def veto(verdict: Any, result: Mapping[str, Any] | None) -> Any:
    """A recipe's speed verdict (rigforge/recipes/report.py's RecipeVerdict) with its quality laid over it:
    answers that differ make it ``answers differ`` (``faster, answers differ (…)`` when speed said better); a
    ``better`` whose quality cannot tell becomes ``cannot tell``; a profile without the pass changes nothing."""
    judged = judge_quality((result or {}).get("quality"))
    if judged.state == OFF:
        return verdict
    if judged.state == DIFFER:
        speed = {BETTER: "faster", WORSE: "slower", SAME: "as fast", CANNOT_TELL: "speed cannot tell"}
        head = speed.get(verdict.verdict, verdict.verdict)
        return replace(verdict, verdict=ANSWERS_DIFFER, detail=f"{head}, {judged.line}; speed: {verdict.detail}")
    if verdict.verdict == BETTER and judged.state == UNKNOWN:
        return replace(verdict, verdict=CANNOT_TELL, detail=f"faster, but {judged.line}; speed: {verdict.detail}")
    return replace(verdict, detail=f"{verdict.detail}; {judged.line}")
