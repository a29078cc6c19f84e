"""rigforge's graded task set: grade-school word problems of its own, in GSM8K's form, made reproducibly.

GSM8K itself (MIT) is in no package this project can install from, and the packaged GSM8K-style generator found
(PyPI reasoning-gym's gsm_symbolic) is made from Apple's GSM-Symbolic templates, licensed CC BY-NC-ND 4.0, which
allows no derivatives to be shared. So the set that ships (``SET_PATH``) is made here from this project's own
templates (rigforge/quality/word_problem_templates.py: two to four steps of whole-number arithmetic, every answer
computed, never typed) and ships under rigforge's licence. It is not GSM8K and its scores are not GSM8K scores:
it tells whether a recipe, driver or image changed how well the rig's model does multi-step arithmetic in words,
measured the same way before and after.

A second, easier set ships beside it, made the same way: ``one-step`` (rigforge/quality/one_step_templates.py, one
operation on small numbers, ``ONE_STEP_PATH``), for a model too small for the word problems (the sandbox's
SmolLM2-135M-Instruct). ``SETS`` names both; the profile picks one (``bench.quality.task_score.set``).

The word problems' file holds ``SHOTS`` worked examples first (their own seed, one per template, marked
``"shot": true``, never asked), then ``QUESTIONS`` graded problems spread evenly over the templates; each line is
``{"question", "answer"}`` with the worked answer ending ``#### N``. A unit test makes each set again and compares
it byte for byte, so the files are exactly what this code makes.

    python -m rigforge.quality.word_problems            # check the shipped files against the templates
    python -m rigforge.quality.word_problems --write    # make them again (after a template changed), atomically
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from random import Random
from typing import Any

from rigforge.quality import one_step_templates
from rigforge.quality.word_problem_templates import TEMPLATES, Template

SET_PATH = Path(__file__).resolve().parent / "word_problems.jsonl"
#: Worked examples at the head of the file: lm-evaluation-harness's GSM8K few-shot task shows 8.
SHOTS = 8
#: Graded problems, 13 of each of the 24 templates: at a 90 % score the 95 % interval is about ±3.5 points.
QUESTIONS = 312
SHOT_SEED, QUESTION_SEED = "rigforge-word-problems-v1-shots", "rigforge-word-problems-v1"
ONE_STEP_PATH = SET_PATH.with_name("one_step_problems.jsonl")
NAMES = ("Ana", "Ben", "Chloe", "Dev", "Elif", "Femi", "Greta", "Hugo", "Ines", "Jonas", "Kemal", "Lena", "Mateo",
         "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq", "Uma", "Vera", "Wen", "Yara")


@dataclass(frozen=True)
class MadeSet:
    """One shipped set: its file, its templates, how many worked examples and questions, and their seeds."""

    path: Path
    templates: tuple[Template, ...]
    shots: int
    questions: int
    shot_seed: str
    question_seed: str


SETS = {
    "word-problems": MadeSet(SET_PATH, TEMPLATES, SHOTS, QUESTIONS, SHOT_SEED, QUESTION_SEED),
    # 4 worked examples (one per template), then 200 questions, 50 a template: a profile asks the first N.
    "one-step": MadeSet(ONE_STEP_PATH, one_step_templates.TEMPLATES, 4, 200, "rigforge-one-step-v1-shots",
                        "rigforge-one-step-v1"),
}


def _problem(template: Template, seed: str) -> dict[str, Any]:
    rng = Random(seed)  # a str seed is hashed with SHA-512: the same draws on every Python 3
    question, steps, answer = template(rng, rng.choice(NAMES))
    return {"question": question, "answer": "\n".join(steps) + f"\n#### {answer}"}


def _drawn(templates: tuple[Template, ...], seed: str, count: int, offset: int = 0) -> Iterator[dict[str, Any]]:
    for index in range(count):
        yield _problem(templates[(index + offset) % len(templates)], f"{seed}:{index}")


def make_set(made: MadeSet = SETS["word-problems"]) -> list[dict[str, Any]]:
    """The shots then the questions; a question that repeats a shot or another question is drawn again."""
    templates = made.templates
    shots = [{**shot, "shot": True} for shot in _drawn(templates, made.shot_seed, made.shots,
                                                       offset=len(templates) // 2)]
    seen = {shot["question"] for shot in shots}
    questions: list[dict[str, Any]] = []
    for index in range(made.questions):
        template, attempt = templates[index % len(templates)], 0
        problem = _problem(template, f"{made.question_seed}:{index}")
        while problem["question"] in seen:
            attempt += 1
            problem = _problem(template, f"{made.question_seed}:{index}:{attempt}")
        seen.add(problem["question"])
        questions.append(problem)
    return shots + questions


def rendered(problems: list[dict[str, Any]]) -> bytes:
    """The file's bytes: one JSON object a line, keys in order, ASCII only."""
    return "".join(json.dumps(problem) + "\n" for problem in problems).encode()


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in its folder and a rename."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temporary, 0o644)  # shipped data, read by everyone
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the shipped sets again")
    arguments = parser.parse_args(argv)
    failed = 0
    for name, made in SETS.items():
        data = rendered(make_set(made))
        digest = hashlib.sha256(data).hexdigest()
        counts = f"{made.shots} shots + {made.questions} questions, sha256 {digest}"
        if arguments.write:
            write_atomically(made.path, data)
            print(f"{name}: wrote {made.path} ({counts})")
        elif (made.path.read_bytes() if made.path.is_file() else b"") != data:
            print(f"{name}: {made.path} differs from what the templates make (sha256 {digest}); run with --write")
            failed = 1
        else:
            print(f"{name}: {made.path} is what the templates make ({counts})")
    return failed


if __name__ == "__main__":
    sys.exit(main())
