"""A graded task score (GSM8K-style: grade-school word problems, few-shot, the final number graded), as vLLM's and
SGLang's CI accuracy gates run it through the OpenAI-compatible server.

The set is ``TASK_SET_PATH``: rigforge's own word problems (rigforge/quality/word_problems.py; 8 worked examples,
marked ``"shot": true``, then 312 graded questions, under rigforge's licence), as JSON lines in GSM8K's own form
(``{"question": …, "answer": "… #### 72"}``, the worked answer ending in the graded number). GSM8K itself (MIT) is in
no package this project can install from, and the packaged GSM8K-style generator found (PyPI reasoning-gym's
gsm_symbolic) is made from Apple's GSM-Symbolic templates, licensed CC BY-NC-ND 4.0, so neither ships. The score is
therefore not a GSM8K score and compares only with itself: the same set, before and after a change. A set without
``shot`` marks (an owner's GSM8K test split, say) gives its first ``shots`` lines as the examples.

The rig asks (rigforge/bench/task_score.py); here the answers are graded, each question's mark kept, and a run's
score judged against the reference's question by question (rigforge/quality/task_paired.py: both runs answered the
same questions): a drop whose 95 % paired interval (Newcombe's) lies wholly past the profile's ``max_drop_points``
means the answers differ; an interval wholly inside it, the same; otherwise cannot tell, which keeps a recipe from
being ``better`` (rigforge/recipes/quality_veto.py). Every line says McNemar's exact p and the smallest drop the
questions can call at all. A score without marks (graded before they were kept) cannot tell.

Which set: ``TASK_SETS`` by the profile's ``task_score.set``: ``word-problems`` (the GPU profiles' instruction
models) or ``one-step`` (one operation on small numbers, rigforge/quality/one_step_templates.py: a set a 135M
instruction model solves in part, so a change of its numerics can show as a drop).

Example::

    score = grade(["72", "10"], ["... so she sold 72 clips.", "The answer is 9."])
    score.percent, score.interval          # (50.0, (9.5, 90.5))
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rigforge.bench.task_score import STOP, shots_prefix
from rigforge.profile.quality import TaskScore as TaskScoreSettings
from rigforge.quality.task_paired import (
    mcnemar_exact_p,
    pair_marks,
    paired_drop_interval,
    smallest_called_drop,
    wilson_bounds,
)
from rigforge.quality.word_problems import SETS

#: The shipped sets by the name the profile gives (``bench.quality.task_score.set``).
TASK_SETS: dict[str, Path] = {name: made.path for name, made in SETS.items()}
TASK_SET_PATH = TASK_SETS["word-problems"]
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


def task_block(settings: TaskScoreSettings, path: Path | None = None) -> dict[str, Any] | None:
    """The bench config's ``quality.task_score`` block (None when the profile turns it off).

    + settings: the profile's ``bench.quality.task_score``
    + path: the set (its ``shot`` head are the examples, else its first ``shots`` lines; the next ``questions``
      are asked); None: the shipped set the profile names
    """
    if not settings.enabled:
        return None
    path = path or TASK_SETS[settings.set]
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


def wilson(correct: int, total: int) -> tuple[float, float]:
    """The 95 % Wilson score interval of a proportion, in percent.

    >>> tuple(round(bound, 1) for bound in wilson(1, 2))
    (9.5, 90.5)
    """
    low, high = wilson_bounds(correct, total)
    return (100.0 * low, 100.0 * high)


def grade(answers: Sequence[str], outputs: Sequence[str]) -> TaskScore:
    """The score of ``outputs`` (the model's texts) against ``answers`` (graded numbers), with its interval."""
    correct = sum(final_number(output) == answer for answer, output in zip(answers, outputs, strict=True))
    total = len(answers)
    return TaskScore(correct, total, 100.0 * correct / total if total else 0.0, wilson(correct, total))


def score_pass(answered: Mapping[str, Any], problems: Sequence[Problem]) -> dict[str, Any]:
    """A task pass's answers graded: ``{correct, total, percent, interval, ungradable, seconds}``, or
    ``{refused}`` when an engine error left a question unanswered (errors are a failure, never a wrong answer).

    + answered: the rig's ``quality.task_score`` (rigforge/bench/task_score.py)
    + problems: the set it was asked from (``task_set``), answers looked up by the question's id; ``marks`` is
      each question's right (True) or wrong, the paired comparison's input
    """
    answers = answered["answers"]
    failed = [answer for answer in answers if answer["error"]]
    if failed:
        return {"refused": f"{len(failed)} of {len(answers)} questions got no answer: {failed[0]['error'][:200]}"}
    expected = [problems[int(answer["id"][1:])].answer for answer in answers]
    score = grade(expected, [answer["text"] for answer in answers])
    ungradable = sum(final_number(answer["text"]) is None for answer in answers)
    marks = {answer["id"]: final_number(answer["text"]) == right for answer, right in zip(answers, expected,
                                                                                         strict=True)}
    return {**asdict(score), "ungradable": ungradable, "set": answered["set"], "seconds": answered["seconds"],
            "marks": marks}


def set_path_of(answered: Mapping[str, Any]) -> Path:
    """The shipped set a pass's answers name (``one_step_problems.jsonl@…``; the word problems when none does)."""
    named = str(answered.get("set") or "").split("@", 1)[0]
    return next((path for path in TASK_SETS.values() if path.name == named), TASK_SET_PATH)


def grade_answered(answered: Mapping[str, Any], path: Path | None = None) -> dict[str, Any]:
    """``score_pass`` against the set at ``path`` (None: the shipped set the answers name), refused when it is not
    the set the questions came from."""
    path = path or set_path_of(answered)
    if not path.is_file() or set_name(path) != answered.get("set"):
        return {"refused": f"the answers are to {answered.get('set')}, and {path} is not that set (any more)"}
    return score_pass(answered, task_set(path))


def compare_scores(reference: Mapping[str, Any] | None, candidate: Mapping[str, Any] | None,
                   max_drop_points: float) -> dict[str, Any]:
    """A run's task score against the reference's, question by question: ``{state, line, drop, interval, lost,
    gained, mcnemar_p, smallest_called_drop}`` (see the module's rule).

    + reference: the reference pass's graded score (``score_pass``)
    + candidate: this run's
    + max_drop_points: the profile's ``bench.quality.task_score.max_drop_points``
    """
    if not candidate or candidate.get("refused") or not reference or reference.get("refused") or \
            "correct" not in reference:
        why = (candidate or {}).get("refused") or (reference or {}).get("refused") or "no reference score"
        return {"state": UNKNOWN, "line": f"task score cannot tell: {why}"}
    if reference.get("set") != candidate.get("set"):
        return {"state": UNKNOWN, "line": f"task score cannot tell: measured on {candidate.get('set')}, the "
                                          f"reference on {reference.get('set')}"}
    if not reference.get("marks") or not candidate.get("marks"):
        side = "the reference's" if not reference.get("marks") else "this run's"
        return {"state": UNKNOWN, "line": f"task score cannot tell: {side} score has no per-question marks (graded "
                                          "before they were kept), and the paired test needs them"}
    try:
        pairs = pair_marks(reference["marks"], candidate["marks"])
    except ValueError as error:
        return {"state": UNKNOWN, "line": f"task score cannot tell: {error}"}
    low, high = paired_drop_interval(pairs)
    p_value = mcnemar_exact_p(pairs.lost, pairs.gained)
    smallest = smallest_called_drop(pairs.total, pairs.both + pairs.lost, max_drop_points)
    floor = f"a drop is called from {smallest:g} points" if smallest is not None else "no drop can be called"
    drop = reference["percent"] - candidate["percent"]
    numbers = (f"{candidate['percent']:.1f} % against the reference's {reference['percent']:.1f} % on the same "
               f"{pairs.total} questions; drop {drop:.1f} points, paired 95 % [{low:.1f}, {high:.1f}]; "
               f"{pairs.lost} lost, {pairs.gained} gained, McNemar exact p {p_value:.3g}; {floor}")
    if low > max_drop_points:
        state, line = DIFFER, f"task score dropped ({numbers}: past the tolerance {max_drop_points:g})"
    elif high <= max_drop_points:
        state, line = SAME, f"task score same ({numbers}: within {max_drop_points:g})"
    else:
        state, line = UNKNOWN, f"task score cannot tell ({numbers}: not clear of the tolerance {max_drop_points:g})"
    return {"state": state, "line": line, "drop": drop, "interval": [low, high], "lost": pairs.lost,
            "gained": pairs.gained, "mcnemar_p": p_value, "smallest_called_drop": smallest}
