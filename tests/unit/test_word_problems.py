"""rigforge's own word problems (rigforge/quality/word_problems.py): the shipped file is what the templates make,
every worked step's arithmetic holds, and every answer is graded the way a model's output is."""

from __future__ import annotations

import json
import re
from fractions import Fraction

from rigforge.quality.word_problem_templates import TEMPLATES
from rigforge.quality.word_problems import QUESTIONS, SET_PATH, SHOTS, make_set, rendered

# The arithmetic just before each " = N" in a worked step: digits, spaces, parentheses and + - * /.
STEP = re.compile(r"([0-9][0-9 ()+*/-]*?|\([0-9 ()+*/-]*?)\s=\s(-?[0-9]+)")


def _shipped() -> list[dict[str, str]]:
    return [json.loads(line) for line in SET_PATH.read_text().splitlines()]


def test_the_shipped_file_is_exactly_what_the_templates_make() -> None:
    assert SET_PATH.read_bytes() == rendered(make_set())


def test_shots_first_then_questions_spread_evenly_and_none_repeated() -> None:
    problems = _shipped()
    assert len(problems) == SHOTS + QUESTIONS
    questions = [problem["question"] for problem in problems]
    assert len(set(questions)) == len(questions)
    assert QUESTIONS % len(TEMPLATES) == 0


def test_every_worked_step_is_true_and_ends_in_the_graded_answer() -> None:
    checked = 0
    for problem in _shipped():
        steps, answer = problem["answer"].rsplit("\n#### ", 1)
        assert re.fullmatch(r"-?[0-9]+", answer) and int(answer) >= 0
        assert re.findall(r"[0-9]+", steps.splitlines()[-1])[-1] == answer
        for left, right in STEP.findall(steps):
            expression = left.strip()
            assert re.fullmatch(r"[0-9 ()+*/-]+", expression)
            value = eval(re.sub(r"([0-9]+)", r"Fraction(\1)", expression), {"Fraction": Fraction})  # noqa: S307
            assert value == int(right), (problem["question"], left, right)
            checked += 1
    assert checked > 2 * (SHOTS + QUESTIONS)


def test_a_template_draws_the_same_problem_from_the_same_seed() -> None:
    from random import Random

    for template in TEMPLATES:
        assert template(Random("x"), "Ana") == template(Random("x"), "Ana")


def test_the_bench_asks_past_the_worked_examples_and_refuses_more_shots_than_the_set_has() -> None:
    import pytest

    from rigforge.profile.loader import load_profile
    from rigforge.quality.tasks import TaskSetMissing, task_block

    settings = load_profile("2x-pix").bench.quality.task_score
    block = task_block(settings)
    assert block is not None and settings.enabled
    shots = {problem["question"] for problem in _shipped()[:SHOTS]}
    asked = [question["question"] for question in block["questions"]]
    assert block["questions"][0]["id"] == f"q{SHOTS}" and len(asked) == min(settings.questions, QUESTIONS)
    assert not shots & set(asked)
    assert block["shots"].count("#### ") == settings.shots
    with pytest.raises(TaskSetMissing, match="task_score.shots: 9, .* allowed: 0 to 8"):
        task_block(settings.model_copy(update={"shots": 9}))
