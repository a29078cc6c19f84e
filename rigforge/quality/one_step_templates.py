"""The templates of rigforge's one-step problems: one operation on small whole numbers, in words.

The word problems (rigforge/quality/word_problem_templates.py) take two to four steps, which the sandbox's 135M
instruction model (SmolLM2-135M-Instruct) all but never gets right: a score at the floor cannot drop. These take
one: it gets about three in four right (measured on a sandbox host, docs/bench.md#quality), so answers made worse
show as a drop. Every answer is computed here, never typed; the wording is this project's own.

Example::

    question, steps, answer = more_apples(Random(1), "Ana")     # (..., ['4 + 8 = 12.'], 12)
"""

from __future__ import annotations

from random import Random

from rigforge.quality.word_problem_templates import Made, Template


def more_apples(rng: Random, name: str) -> Made:
    have, more = rng.randint(2, 9), rng.randint(2, 9)
    return (f"{name} has {have} apples and gets {more} more. How many apples does {name} have now?",
            [f"{have} + {more} = {have + more}."], have + more)


def pens_left(rng: Random, name: str) -> Made:
    have = rng.randint(6, 19)
    given = rng.randint(1, have - 1)
    return (f"{name} has {have} pens and gives away {given}. How many pens are left?",
            [f"{have} - {given} = {have - given}."], have - given)


def pages_read(rng: Random, name: str) -> Made:
    monday, tuesday = rng.randint(10, 60), rng.randint(10, 39)
    return (f"{name} reads {monday} pages on Monday and {tuesday} pages on Tuesday. How many pages in all?",
            [f"{monday} + {tuesday} = {monday + tuesday}."], monday + tuesday)


def egg_boxes(rng: Random, name: str) -> Made:
    boxes, each = rng.randint(2, 9), rng.randint(2, 9)
    return (f"{name} buys {boxes} boxes with {each} eggs each. How many eggs?",
            [f"{boxes} * {each} = {boxes * each}."], boxes * each)


TEMPLATES: tuple[Template, ...] = (more_apples, pens_left, pages_read, egg_boxes)
