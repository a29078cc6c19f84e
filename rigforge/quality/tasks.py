"""A graded task score (GSM8K-style: grade-school word problems, few-shot, the final number graded), as vLLM's and
SGLang's CI accuracy gates run it through the OpenAI-compatible server.

The set is ``TASK_SET_PATH``: rigforge's own word problems (rigforge/quality/word_problems.py; 8 worked examples,
marked ``"shot": true``, then 312 graded questions, under rigforge's licence), as JSON lines in GSM8K's own form
(``{"question": …, "answer": "… #### 72"}``, the worked answer ending in the graded number). GSM8K itself (MIT) is in
no package this project can install from, and the packaged GSM8K-style generator found (PyPI reasoning-gym's
gsm_symbolic) is made from Apple's GSM-Symbolic templates, licensed CC BY-NC-ND 4.0, so neither ships. The score is
therefore not a GSM8K score and compares only with itself: the same set, before and after a change. A set without
``shot`` marks (an owner's GSM8K test split, say) gives its first ``shots`` lines as the examples.

The rig asks (rigforge/bench/task_score.py); here the answers are graded, and a run's score judged against the
reference's: a drop whose 95 % interval (Newcombe's, from the two Wilson intervals) lies wholly past the profile's
``max_drop_points`` means the answers differ; an interval wholly inside it, the same; otherwise cannot tell.

Example::

    score = grade(["72", "10"], ["... so she sold 72 clips.", "The answer is 9."])
    score.percent, score.interval          # (50.0, (9.5, 90.5))
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rigforge.bench.task_score import STOP, shots_prefix
from rigforge.profile.quality import TaskScore as TaskScoreSettings
from rigforge.quality.word_problems import SET_PATH

TASK_SET_PATH = SET_PATH
#: The last number in a text, as lm-evaluation-harness's GSM8K "flexible-extract" reads an answer.
NUMBER = re.compile(r"-?[0-9][0-9,]*(?:\.[0-9]+)?")
SAME, DIFFER, UNKNOWN = "same", "differ", "cannot tell"


class TaskSetMissing(ValueError):
    """The profile asks for a task score the set cannot give (missing, or fewer worked examples than asked)."""


@dataclass(frozen=True)
class Problem:
    question: str
    answer: str  # the graded final number
    worked: str = ""  # the worked answer, ending ``#### <answer>`` (a few-shot example's text)
    shot: bool = False  # a worked example of the set's head, never asked


@dataclass(frozen=True)
class TaskScore:
    correct: int
    total: int
    percent: float
    interval: tuple[float, float]  # 95 % Wilson interval, in percent


def task_set(path: Path = TASK_SET_PATH) -> list[Problem]:
    """The graded set; TaskSetMissing (naming the switch and why) when it is not there."""
    if not path.is_file():
        raise TaskSetMissing(
            f"bench.quality.task_score.enabled: no graded set at {path} (rigforge ships one: "
            "python -m rigforge.quality.word_problems --write makes it again); or set it to false")
    problems = []
    for line in path.read_text().splitlines():
        if line.strip():
            item = json.loads(line)
            problems.append(Problem(item["question"], final_number(item["answer"]) or "", item["answer"],
                                    bool(item.get("shot"))))
    return problems


def set_name(path: Path = TASK_SET_PATH) -> str:
    """The set's file name and the first 12 hex digits of its sha256: which set a score was measured on."""
    return f"{path.name}@{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}"


def task_block(settings: TaskScoreSettings, path: Path = TASK_SET_PATH) -> dict[str, Any] | None:
    """The bench config's ``quality.task_score`` block (None when the profile turns it off).

    + settings: the profile's ``bench.quality.task_score``
    + path: the set (its ``shot`` head are the examples, else its first ``shots`` lines; the next ``questions``
      are asked)
    """
    if not settings.enabled:
        return None
    problems = task_set(path)
    head = next((index for index, problem in enumerate(problems) if not problem.shot), len(problems)) or settings.shots
    if settings.shots > head:
        raise TaskSetMissing(f"bench.quality.task_score.shots: {settings.shots}, but {path} has {head} worked "
                             f"examples; allowed: 0 to {head}")
    asked = problems[head:head + settings.questions]
    if not asked:
        raise TaskSetMissing(f"bench.quality.task_score: {path} has {len(problems)} problems, none left after "
                             f"the {head} few-shot examples")
    return {"set": set_name(path), "shots": shots_prefix([(shot.question, shot.worked)
                                                          for shot in problems[:settings.shots]]),
            "max_tokens": settings.max_tokens, "concurrency": settings.concurrency, "stop": list(STOP),
            "questions": [{"id": f"q{head + index}", "question": problem.question}
                          for index, problem in enumerate(asked)]}


def final_number(text: str) -> str | None:
    """The graded number of an answer: after GSM8K's ``####`` where there is one, else the last number.

    >>> final_number("She sold 48/2 = 24 clips in May.\\n#### 72"), final_number("The answer is 1,000.")
    ('72', '1000')
    """
    tail = text.rsplit("####", 1)[-1]
    numbers = NUMBER.findall(tail)
    if not numbers:
        return None
    value = numbers[-1].replace(",", "").rstrip(".")
    return value[:-2] if value.endswith(".0") else value


def wilson(correct: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson score interval of a proportion, in percent.

    >>> tuple(round(bound, 1) for bound in wilson(1, 2))
    (9.5, 90.5)
    """
    if total == 0:
        return (0.0, 100.0)
    rate = correct / total
    centre = (rate + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(rate * (1 - rate) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return (100.0 * max(0.0, centre - half), 100.0 * min(1.0, centre + half))


def grade(answers: Sequence[str], outputs: Sequence[str]) -> TaskScore:
    """The score of ``outputs`` (the model's texts) against ``answers`` (graded numbers), with its interval."""
    correct = sum(final_number(output) == answer for answer, output in zip(answers, outputs, strict=True))
    total = len(answers)
    return TaskScore(correct, total, 100.0 * correct / total if total else 0.0, wilson(correct, total))


def score_pass(answered: Mapping[str, Any], problems: Sequence[Problem]) -> dict[str, Any]:
    """A task pass's answers graded: ``{correct, total, percent, interval, ungradable, seconds}``, or
    ``{refused}`` when an engine error left a question unanswered (errors are a failure, never a wrong answer).

    + answered: the rig's ``quality.task_score`` (rigforge/bench/task_score.py)
    + problems: the set it was asked from (``task_set``), answers looked up by the question's id
    """
    answers = answered["answers"]
    failed = [answer for answer in answers if answer["error"]]
    if failed:
        return {"refused": f"{len(failed)} of {len(answers)} questions got no answer: {failed[0]['error'][:200]}"}
    expected = [problems[int(answer["id"][1:])].answer for answer in answers]
    score = grade(expected, [answer["text"] for answer in answers])
    ungradable = sum(final_number(answer["text"]) is None for answer in answers)
    return {**asdict(score), "ungradable": ungradable, "set": answered["set"], "seconds": answered["seconds"]}


def grade_answered(answered: Mapping[str, Any], path: Path = TASK_SET_PATH) -> dict[str, Any]:
    """``score_pass`` against the set at ``path``, refused when it is not the set the questions came from."""
    if not path.is_file() or set_name(path) != answered.get("set"):
        return {"refused": f"the answers are to {answered.get('set')}, and {path} is not that set (any more)"}
    return score_pass(answered, task_set(path))


def drop_interval(reference: Mapping[str, Any], candidate: Mapping[str, Any]) -> tuple[float, float]:
    """The 95 % interval of reference minus candidate, in points (Newcombe's hybrid score method).

    >>> tuple(round(bound, 1) for bound in drop_interval({"correct": 90, "total": 100}, {"correct": 70, "total": 100}))
    (9.0, 30.6)
    """
    p1, p2 = reference["correct"] / reference["total"], candidate["correct"] / candidate["total"]
    (l1, u1), (l2, u2) = (tuple(bound / 100 for bound in wilson(side["correct"], side["total"]))
                          for side in (reference, candidate))
    low = p1 - p2 - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = p1 - p2 + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return (100.0 * low, 100.0 * high)


def compare_scores(reference: Mapping[str, Any] | None, candidate: Mapping[str, Any] | None,
                   max_drop_points: float) -> dict[str, Any]:
    """A run's task score against the reference's: ``{state, line, drop, interval}`` (see the module's rule)."""
    if not candidate or candidate.get("refused") or not reference or reference.get("refused") or \
            "correct" not in reference:
        why = (candidate or {}).get("refused") or (reference or {}).get("refused") or "no reference score"
        return {"state": UNKNOWN, "line": f"task score cannot tell: {why}"}
    if reference.get("set") != candidate.get("set"):
        return {"state": UNKNOWN, "line": f"task score cannot tell: measured on {candidate.get('set')}, the "
                                          f"reference on {reference.get('set')}"}
    low, high = drop_interval(reference, candidate)
    numbers = (f"{candidate['percent']:.1f} % [{candidate['interval'][0]:.1f}, {candidate['interval'][1]:.1f}] of "
               f"{candidate['total']} against the reference's {reference['percent']:.1f} %; drop "
               f"{reference['percent'] - candidate['percent']:.1f} points, 95 % [{low:.1f}, {high:.1f}]")
    if low > max_drop_points:
        state, line = DIFFER, f"task score dropped ({numbers}: past the tolerance {max_drop_points:g})"
    elif high <= max_drop_points:
        state, line = SAME, f"task score same ({numbers}: within {max_drop_points:g})"
    else:
        state, line = UNKNOWN, f"task score cannot tell ({numbers}: not clear of the tolerance {max_drop_points:g})"
    return {"state": state, "line": line, "drop": reference["percent"] - candidate["percent"],
            "interval": [low, high]}
