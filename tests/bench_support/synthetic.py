"""Seeded synthetic bench sides with a profile's own cells, metrics, repeats and engine starts, for calibrating
verdicts.

SYNTHETIC, labelled as such: every engine start draws one **offset** (log-normal, sd ``offset``) that moves
every metric of every cell of that start the same way (a slow start is slower everywhere: lower tok/s, higher
ms), and every repeat inside the start adds its own log-normal **noise** (sd ``noise``) per metric. A shift
multiplies the primary of the "after" side in its better direction (negative: worse), every other judged metric
by the same shift or by its own (``others``); one **bad start** (``bad``: that much slower, on one side) stands
for a start that came up wrong. The sandbox e2e tournaments with a random CPU quota per engine start test the
same thing on real starts.

Two designs, as run:

- ``tournament``: the starting recipe's k starts against two recipes identical to it (k starts each; the A/A
  tournament of docs/recipes.md), run as roles/recipes_decide.py runs it: the first look at its rate
  (rigforge.recipes.rounds.look_rates); where the profile looks twice, the plan's extra rounds (``extra_rounds``)
  of the start and every recipe without a claim, then the second look at the last look's rate, the first look's
  claims kept; then the best of the recipes judged better measured again in k new starts a side against k new
  starts of the start, at the whole rate, and ``cannot tell`` unless better again (confirm_best); every other
  better stays labelled unconfirmed. Without a true gain the rate is counted per tournament: a claim for either
  recipe, confirmed or not, is a false one; with one, a tournament that confirmed a better recipe found it (an
  unconfirmed better is not a find: keep=best does not move the rig to it).
- ``driver update``: k starts before against k starts after, one comparison.

Example::

    rates = claim_rates(load_profile("4x-threadripper"), noise=0.02, offset=0.05, shift=0.2, draws=1000, seed=7,
                        starts=3)
    rates.better                      # share of draws judged better
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rigforge.bench.config import COMPLETIONS
from rigforge.profile import Profile
from rigforge.recipes.rounds import extra_rounds, look_rates
from rigforge.updates.comparison import METRICS, RegressionPolicy
from rigforge.updates.verdict import BETTER, CANNOT_TELL, SAME, WORSE, Question, judge, overall

LEVEL = 100.0
TOURNAMENT, DRIVER_UPDATE = "tournament", "driver update"
#: A better the confirmation did not measure again (the report's label; rigforge.recipes.report.RecipeVerdict.label).
UNCONFIRMED = "better, unconfirmed"
#: Identical recipes a synthetic A/A tournament holds beside its start.
TOURNAMENT_RECIPES = 2
#: The bench of measurements/recipes_aa.py --one-cell: C=1 only, 3 s windows, 2 repeats a start (the starts decide).
ONE_CELL = {"concurrency": [1], "cell_seconds": 3, "repeats": 2}


def one_cell(profile: Profile) -> Profile:
    """The profile with the one-cell bench of the sandbox A/A runs (its plan's extra rounds follow from it)."""
    return profile.model_copy(update={"bench": profile.bench.model_copy(update=ONE_CELL)})


@dataclass(frozen=True)
class Rates:
    """Shares of draws judged each way."""

    better: float
    worse: float
    draws: int
    same: float = 0.0  # judged same (per comparison): what an owner can act on when nothing changed
    cannot: float = 0.0  # judged cannot tell (per comparison): a driver update's "cannot tell" stops the rollout

    @property
    def stopped(self) -> float:
        """Worse or cannot tell: a driver update that stops the rollout (one comparison a draw)."""
        return self.worse + self.cannot

    @property
    def claimed(self) -> float:
        """Better or worse: on identical distributions, every such claim is false."""
        return self.better + self.worse


@dataclass(frozen=True)
class Judged:
    """One judged (cell, metric) of the profile's grid."""

    concurrency: int
    input_tokens: int
    higher_is_better: bool
    tolerance: float
    primary: bool
    metric_index: int


def judged_grid(profile: Profile) -> list[Judged]:
    """Every (cell, metric) of the profile's completion grid a tolerance rule judges."""
    policy = RegressionPolicy.from_profile(profile)
    grid = []
    for concurrency in profile.bench.concurrency:
        for input_tokens in profile.bench.input_tokens:
            for index, metric in enumerate(METRICS):
                tolerance = policy.tolerance(metric.name, concurrency, input_tokens)
                if tolerance is not None:
                    primary = policy.primary is not None and policy.primary.names(
                        (COMPLETIONS, concurrency, input_tokens), metric.name)
                    grid.append(Judged(concurrency, input_tokens, metric.higher_is_better, tolerance, primary, index))
    return grid


Shifts = float | Sequence[float]


def _shifts(grid: list[Judged], shift: Shifts) -> list[float]:
    """One shift per judged (cell, metric): a number moves them all; a sequence gives each its own."""
    return [shift] * len(grid) if isinstance(shift, (int, float)) else list(shift)


def _start_values(rng: random.Random, grid: list[Judged], repeats: int, noise: float, offset: float,
                  shift: Shifts, bad: float = 0.0) -> list[float]:
    """One start's value (geometric mean of its repeats) of every judged (cell, metric); ``bad`` moves the whole
    start that much slower (log units) on top of its drawn offset."""
    start = rng.gauss(0.0, offset) + bad
    values = []
    for item, moved in zip(grid, _shifts(grid, shift), strict=True):
        direction = 1.0 if item.higher_is_better else -1.0
        inside = sum(rng.gauss(0.0, noise) for _ in range(repeats)) / repeats
        values.append(LEVEL * math.exp(direction * (math.log1p(moved) - start) + inside))
    return values


def side(rng: random.Random, grid: list[Judged], starts: int, repeats: int, noise: float, offset: float,
         shift: Shifts = 0.0, bad: float = 0.0) -> list[tuple[float, ...]]:
    """``starts`` engine starts of one side: per judged (cell, metric), its start values; the last start ``bad``
    slower (log units; 0: none)."""
    drawn = [_start_values(rng, grid, repeats, noise, offset, shift, bad if index == starts - 1 else 0.0)
             for index in range(starts)]
    return [tuple(start[position] for start in drawn) for position in range(len(grid))]


def questions(grid: list[Judged], before: list[tuple[float, ...]], after: list[tuple[float, ...]]) -> list[Question]:
    return [Question(old, new, item.higher_is_better, item.tolerance, item.primary)
            for item, old, new in zip(grid, before, after, strict=True)]


def _verdict(grid: list[Judged], before: list[tuple[float, ...]], after: list[tuple[float, ...]],
             rate: float) -> str:
    asked = questions(grid, before, after)
    primary = next((index for index, question in enumerate(asked) if question.primary), None)
    return overall(judge(asked, rate), primary)[0]


Draw = Callable[[int, Shifts, float], list[tuple[float, ...]]]


def _more(side_values: list[tuple[float, ...]], more: list[tuple[float, ...]]) -> list[tuple[float, ...]]:
    """A side with more starts: per judged (cell, metric), its earlier start values and the new ones."""
    return [old + new for old, new in zip(side_values, more, strict=True)]


def _primary_level(grid: list[Judged], side_values: list[tuple[float, ...]]) -> float:
    """The side's primary, the geometric mean of its start values (the report's best picks the highest)."""
    values = next((values for item, values in zip(grid, side_values, strict=True) if item.primary), side_values[0])
    return math.exp(sum(math.log(value) for value in values) / len(values))


def tournament_verdicts(profile: Profile, grid: list[Judged], draw: Draw, starts: int, shift: Shifts,
                        rate: float, bad: tuple[float, str] = (0.0, "after")) -> list[str]:
    """Each identical (or shifted) recipe's verdict as roles/recipes_decide.py reaches it: first look, the plan's
    extra rounds and the second look where the profile looks twice (claims of the first look kept), each look at
    its rate (rigforge.recipes.rounds.look_rates), then the best of those judged better confirmed in new starts;
    every other better stays ``UNCONFIRMED``, as the report labels it.

    + draw: (starts, shift, bad) -> one side of that many starts, the last ``bad`` slower
    + starts: k, the starts a side of the rounds and of the confirmation
    + rate: the profile's false-claim rate
    + bad: one bad start in the k rounds: how much slower (log units) and on which side ("before": the start
      recipe's, so every comparison sees it; "after": the first recipe's)
    """
    first, *rest = look_rates(profile, rate)
    slow, where = bad
    before = draw(starts, 0.0, slow if where == "before" else 0.0)
    sides = [draw(starts, shift, slow if where == "after" and index == 0 else 0.0)
             for index in range(TOURNAMENT_RECIPES)]
    verdicts = [_verdict(grid, before, after, first) for after in sides]
    if rest:
        unclaimed = [index for index, verdict in enumerate(verdicts) if verdict in (SAME, CANNOT_TELL)]
        rounds = extra_rounds(profile, 1 + len(unclaimed)) if unclaimed else 0
        if rounds:
            before = _more(before, draw(rounds, 0.0, 0.0))
            for index in unclaimed:
                sides[index] = _more(sides[index], draw(rounds, shift, 0.0))
        verdicts = [_verdict(grid, before, sides[index], rest[0]) if index in unclaimed else verdict
                    for index, verdict in enumerate(verdicts)]
    better = [index for index, verdict in enumerate(verdicts) if verdict == BETTER]
    if better:
        best = max(better, key=lambda index: _primary_level(grid, sides[index]))
        if _verdict(grid, draw(starts, 0.0, 0.0), draw(starts, shift, 0.0), rate) != BETTER:
            verdicts[best] = CANNOT_TELL
        verdicts = [UNCONFIRMED if verdict == BETTER and index != best else verdict
                    for index, verdict in enumerate(verdicts)]
    return verdicts


def item_shifts(grid: list[Judged], primary: float, others: float | None = None) -> list[float]:
    """The primary moved by ``primary``, every other judged metric by ``others`` (None: by ``primary`` too)."""
    return [primary if item.primary or others is None else others for item in grid]


def claim_rates(profile: Profile, noise: float, offset: float, shift: float, draws: int, seed: int, starts: int,
                design: str = DRIVER_UPDATE, others: float | None = None, bad: tuple[float, str] = (0.0, "after"),
                ) -> Rates:
    """How often a comparison of the profile's grid says better / worse / same.

    + noise: relative sd of one repeat (0.02: GPU-like, 0.30: a loaded 2-core sandbox)
    + offset: relative sd of one engine start's own speed (0.15: the autotuner spread of rig-facts §8.4)
    + shift: the true change of the "after" side's primary (0: an A/A test; -0.049: 4.9 % worse)
    + starts: engine starts a side (the profile's ``bench.verdicts.starts``, or a driver update's planned k)
    + design: TOURNAMENT (a start and two identical recipes, any claim counts) or DRIVER_UPDATE
    + others: the true change of every other judged metric (None: the primary's)
    + bad: one bad start: how much slower (log units, 0: none) and on which side ("before" or "after")
    """
    rng, grid = random.Random(seed), judged_grid(profile)
    rate = RegressionPolicy.from_profile(profile).false_claim_rate
    moved = item_shifts(grid, shift, others)

    def draw(count: int, change: Shifts, slow: float) -> list[tuple[float, ...]]:
        return side(rng, grid, count, profile.bench.repeats, noise, offset, change, slow)

    better = worse = same = cannot = 0.0
    for _ in range(draws):
        if design == TOURNAMENT:
            verdicts = tournament_verdicts(profile, grid, draw, starts, moved, rate, bad)
        else:
            slow, where = bad
            verdicts = [_verdict(grid, draw(starts, 0.0, slow if where == "before" else 0.0),
                                 draw(starts, moved, slow if where == "after" else 0.0), rate)]
        same += verdicts.count(SAME) / len(verdicts)
        cannot += verdicts.count(CANNOT_TELL) / len(verdicts)
        if shift > 0 and design == TOURNAMENT:  # a real gain: a confirmed better found (keep=best moves to it)
            better += BETTER in verdicts
            worse += verdicts.count(WORSE) / len(verdicts)
        elif shift > 0:
            better += verdicts.count(BETTER) / len(verdicts)
            worse += verdicts.count(WORSE) / len(verdicts)
        else:  # no gain: any claim in the tournament is false, confirmed or not (the report shows both)
            better += BETTER in verdicts or UNCONFIRMED in verdicts
            worse += WORSE in verdicts
    return Rates(better / draws, worse / draws, draws, same / draws, cannot / draws)


def synthetic_result(profile: Profile, rng: random.Random, noise: float, offset: float = 0.0,
                     shift: float = 0.0) -> dict[str, Any]:
    """One engine start's bench result of the profile's completion grid: ``bench.repeats`` repeats per cell, every
    metric log-normal with sd ``noise`` around LEVEL, the whole start moved by one offset of sd ``offset``."""
    start = rng.gauss(0.0, offset)
    cells = []
    for concurrency in profile.bench.concurrency:
        for input_tokens in profile.bench.input_tokens:
            repeats = []
            for _ in range(profile.bench.repeats):
                block: dict[str, Any] = {}
                for metric in METRICS:
                    direction = 1.0 if metric.higher_is_better else -1.0
                    value = LEVEL * math.exp(direction * (math.log1p(shift) - start) + rng.gauss(0.0, noise))
                    if metric.stat is None:
                        block[metric.key] = value
                    else:
                        block.setdefault(metric.key, {})[metric.stat] = value
                repeats.append(block)
            cells.append({"concurrency": concurrency, "input_tokens": input_tokens, "status": "ok",
                          "repeats": repeats, "metrics": repeats[0]})
    return {"cells": cells, "metadata": {}}
