"""The engine start as the unit of a measurement: the order of a tournament's starts and what they cost.

A tournament measures every recipe ``bench.verdicts.starts`` (k) times, each time in a fresh engine start with its
own warm-up: k rounds, every recipe once per round. Round 1 keeps the declared order (the starting recipe first,
so a start that cannot be measured stops the tournament before anything else runs); rounds 2..k are shuffled with
a seed the report names, as Google Benchmark's ``--benchmark_enable_random_interleaving`` shuffles its
repetitions: whatever drifts during the run (a rig warming up, a neighbour's load) lands on every recipe instead
of on the one measured last, and no recipe always follows the same other one. The start measured again at the end
of the older tournament (A B C … A) is this interleaving's k-th round.

Pure functions; roles/recipes.py runs the rounds, roles/driver_update.py measures k starts before and k after.

Example::

    round_orders(["default", "aa1", "one-thread"], 3, seed="20261127T060000Z")
    # [['default', 'aa1', 'one-thread'], ['aa1', 'one-thread', 'default'], ['one-thread', 'default', 'aa1']]
    plan_line(profile, ["default", "aa1", "one-thread"])
    # 'plan: 3 recipes x 3 starts = 9 engine starts of 3 cells x 2 repeats; about 5 min ...'
"""

from __future__ import annotations

import random

from rigforge.bench_runs.starts import cost_words, minutes
from rigforge.profile import Profile


def round_orders(names: list[str], starts: int, seed: str) -> list[list[str]]:
    """The recipes of each round: round 1 as given (the start first), each later one shuffled by ``seed``.

    + names: the recipes, the starting one first
    + starts: rounds (engine starts of each recipe)
    + seed: the shuffle's seed (the experiment's stamp: the report names it, so the order can be told again)

    >>> round_orders(["a", "b"], 1, "s")
    [['a', 'b']]
    >>> sorted(round_orders(["a", "b", "c"], 3, "s")[2])
    ['a', 'b', 'c']
    """
    shuffle = random.Random(seed)
    return [list(names)] + [shuffle.sample(names, len(names)) for _ in range(starts - 1)]


def plan_line(profile: Profile, names: list[str]) -> str:
    """What a tournament of ``names`` will measure and cost, said before it measures (the dry run prints it)."""
    starts = profile.bench.verdicts.starts
    budget = profile.bench.verdicts.decide_budget_s
    more = (f"; at most {minutes(budget)} more (bench.verdicts.decide_budget_s) for extra starts where a verdict "
            "cannot tell") if budget else ""
    return (f"plan: {len(names)} recipes x {starts} starts = {cost_words(profile, len(names) * starts)}, in "
            f"{starts} interleaved round{'s' if starts != 1 else ''}{more}; {2 * starts} more starts to confirm "
            "a recipe judged better")
