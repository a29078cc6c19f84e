"""The engine start as the unit of a measurement: the order of a tournament's starts and what they cost.

A tournament measures every recipe ``bench.verdicts.starts`` (k) times, each time in a fresh engine start with its
own warm-up: k rounds, every recipe once per round. Round 1 keeps the declared order (the starting recipe first,
so a start that cannot be measured stops the tournament before anything else runs); rounds 2..k are shuffled with
a seed the report names, as Google Benchmark's ``--benchmark_enable_random_interleaving`` shuffles its
repetitions: whatever drifts during the run (a rig warming up, a neighbour's load) lands on every recipe instead
of on the one measured last, and no recipe always follows the same other one. The start measured again at the end
of the older tournament (A B C … A) is this interleaving's k-th round.

**Two looks, each at half the false-claim rate.** Where the profile's ``decide_budget_s`` affords at least one
more round of the start and one recipe (by the plan's own estimate of a start, ``extra_rounds``), a tournament
looks at its verdicts twice: after the k rounds, and after as many more rounds of the start and every recipe
without a claim as the budget affords (never more than the plan's count, so the count is fixed before anything is
measured and does not depend on what the first look saw). A better/worse claim made at the first look is final;
the others are judged again on all their starts. Looking twice gives a false claim two chances, so each look
tests at half of ``bench.verdicts.false_claim_rate`` (Bonferroni over the looks, ``per_look``): the two together
keep the profile's rate whatever the first look saw, with no assumption about how the looks correlate. ``same``
is decided at the last look only (the first look's ``same`` is not final): one equivalence test per recipe, at
its documented 90 % interval. A profile whose budget affords no round (the GPU profiles: a start costs more than
their budget) looks once, at the whole rate.

Pure functions; roles/recipes.py runs the rounds, roles/driver_update.py measures k starts before and k after.

Example::

    round_orders(["default", "aa1", "one-thread"], 3, seed="20261127T060000Z")
    # [['default', 'aa1', 'one-thread'], ['aa1', 'one-thread', 'default'], ['one-thread', 'default', 'aa1']]
    plan_line(profile, ["default", "aa1", "one-thread"])
    # 'plan: 3 recipes x 3 starts = 9 engine starts of 3 cells x 2 repeats; about 5 min ...'
"""

from __future__ import annotations

import random
from dataclasses import replace

from rigforge.bench_runs.starts import cost_words, minutes, start_seconds
from rigforge.profile import Profile
from rigforge.updates.policy import RegressionPolicy


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
    if looks(profile) > 1:
        more += f" (two looks, each at half the false-claim rate: {profile.bench.verdicts.false_claim_rate / 2:g})"
    return (f"plan: {len(names)} recipes x {starts} starts = {cost_words(profile, len(names) * starts)}, in "
            f"{starts} interleaved round{'s' if starts != 1 else ''}{more}; {2 * starts} more starts to confirm "
            "a recipe judged better")


def extra_rounds(profile: Profile, names: int) -> int:
    """Rounds of more starts of ``names`` recipes (the start among them) that ``bench.verdicts.decide_budget_s``
    affords by the plan's estimate of one start (rigforge.bench_runs.starts.start_seconds): the most a tournament
    measures after its k rounds.

    + profile: the rig's profile
    + names: recipes in each extra round, the start among them

    Example::

        extra_rounds(load_profile("sandbox"), 2)     # 1: a start estimated at 50 s, 120 s of budget: 2 x 50 s fit once
    """
    per_round = start_seconds(profile) * max(names, 1)
    return int(profile.bench.verdicts.decide_budget_s // per_round) if per_round > 0 else 0


def looks(profile: Profile) -> int:
    """How often a tournament on the profile judges: 2 when its budget affords a round of the start and one recipe
    (``extra_rounds(profile, 2) >= 1``), else 1. Fixed by the profile, before anything is measured."""
    return 2 if extra_rounds(profile, 2) >= 1 else 1


def per_look(policy: RegressionPolicy, profile: Profile) -> RegressionPolicy:
    """The policy each look judges with: the profile's false-claim rate split evenly over its looks (Bonferroni:
    the chance of a false claim at any look is at most the sum of the looks' rates).

    + policy: the comparison's policy (RegressionPolicy.from_profile)
    + profile: the rig's profile (its budget says how many looks)
    """
    return replace(policy, false_claim_rate=policy.false_claim_rate / looks(profile))
