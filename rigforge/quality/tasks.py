"""A graded task score (GSM8K-style: grade-school word problems, few-shot, the final number graded), as vLLM's and
SGLang's CI accuracy gates run it through the OpenAI-compatible server.

The set itself must ship with rigforge, with its licence, at ``TASK_SET_PATH`` (JSON lines in GSM8K's own form:
``{"question": …, "answer": "… #### 72"}``; GSM8K is MIT-licensed). None ships today: GSM8K is in no Debian package,
and the PyPI package that names it (aviary-gsm8k 0.37.0) loads it from the Hugging Face hub at run time, which a
rig's controller may not reach. So ``bench.quality.task_score.enabled`` is false in every profile, and turning it
on without the set is refused with this reason (``task_set``).

Example::

    score = grade(["72", "10"], ["... so she sold 72 clips.", "The answer is 9."])
    score.percent, score.interval          # (50.0, (9.5, 90.5))
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

TASK_SET_PATH = Path(__file__).resolve().parent / "gsm8k.jsonl"
#: The last number in a text, as lm-evaluation-harness's GSM8K "flexible-extract" reads an answer.
NUMBER = re.compile(r"-?[0-9][0-9,]*(?:\.[0-9]+)?")


class TaskSetMissing(ValueError):
    """The profile asks for a task score and no graded set ships with rigforge."""


@dataclass(frozen=True)
class Problem:
    question: str
    answer: str  # the graded final number


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
            f"bench.quality.task_score.enabled: no graded set at {path}: none ships with rigforge (GSM8K is in no "
            "Debian package, and PyPI's aviary-gsm8k fetches it from the Hugging Face hub at run time); set it to "
            "false, or put GSM8K's test split there as JSON lines with its MIT licence beside it")
    problems = []
    for line in path.read_text().splitlines():
        if line.strip():
            item = json.loads(line)
            problems.append(Problem(item["question"], final_number(item["answer"]) or ""))
    return problems


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


def few_shot_prompt(shots: Sequence[Problem], question: str) -> str:
    """GSM8K's few-shot form as lm-evaluation-harness sends it: ``Question: …\\nAnswer: …`` blocks, then the one
    to answer."""
    blocks = [f"Question: {shot.question}\nAnswer: The answer is {shot.answer}." for shot in shots]
    return "\n\n".join([*blocks, f"Question: {question}\nAnswer:"])


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
