"""The engine start as the unit of a measurement: the order of a tournament's starts and what they cost.

A tournament measures every recipe ``bench.verdicts.starts`` (k) times, each time in a fresh engine start with its
own warm-up: k rounds, every recipe once per round. Round 1 keeps the declared order (the starting recipe first,
so a start that cannot be measured stops the tournament before anything else runs); rounds 2..k are shuffled with
a seed the report names, as Google Benchmark's ``--benchmark_enable_random_interleaving`` shuffles its
repetitions: whatever drifts during the run (a rig warming up, a neighbour's load) lands on every recipe instead
of on the one measured last, and no recipe always follows the same other one. The start measured again at the end
of the older tournament (A B C … A) is this interleaving's k-th round.

**Two looks, the false-claim rate spent mostly at the last.** Where the profile's ``decide_budget_s`` affords at
least one more round of the start and one recipe (by the plan's own estimate of a start benching the judged cells,
``extra_rounds``), a tournament looks at its verdicts twice: after the k rounds, and after more rounds of the start
and every recipe the first look left without a claim. How many more is not fixed in advance: the plan fixes the
most (``extra_rounds`` for that many recipes), but which recipes the first look leaves open and the rig's measured
wall time decide how many are measured (roles/recipes_decide.py ``decide_more``). A better/worse claim made at the
first look is final; the others are judged again on all their starts. Looking twice gives a false claim two
chances, so the two looks' rates add up to ``bench.verdicts.false_claim_rate`` (``look_rates``; the sum keeps the
profile's rate whatever the first look saw, however many rounds came between and however the looks correlate,
with no assumption about Welch's approximate p). The split is O'Brien-Fleming-like, chosen for power: the first
look gets what the Lan-DeMets O'Brien-Fleming spending function spends at the planned information fraction
t = k / (k + the most extra rounds for the start and one recipe), 2 - 2 Phi(z(1 - rate / 2) / sqrt t), and the
last look, which holds the most starts, the rest (P. C. O'Brien, T. R. Fleming, Biometrics 35, 1979; K. K. G.
Lan, D. L. DeMets, Biometrika 70, 1983). A clear change (a recipe 40 % slower) is still claimed at the first look;
a change near the resolution waits for the look with the most starts, which then tests at almost the whole rate
instead of half of it. ``same`` is decided at the last look only (the first look's ``same`` is not final): one
equivalence test per recipe, at its documented 90 % interval. A profile whose budget affords no round (the GPU
profiles: a start costs more than their budget) looks once, at the whole rate.

Pure functions; roles/recipes.py runs the rounds, roles/driver_update.py measures k starts before and k after.

Example::

    round_orders(["default", "aa1", "one-thread"], 3, seed="20261127T060000Z")
    # [['default', 'aa1', 'one-thread'], ['aa1', 'one-thread', 'default'], ['one-thread', 'default', 'aa1']]
    plan_line(profile, ["default", "aa1", "one-thread"])
    # 'plan: 3 recipes x 3 starts = 9 engine starts of 3 cells x 2 repeats; about 8 min ...'
"""

from __future__ import annotations

import math
import random
from dataclasses import replace
from statistics import NormalDist

from rigforge.bench_runs.starts import cost_words, judged_start_seconds, minutes
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
    """What a tournament of ``names`` will measure and cost, in minutes, said before it measures (the dry run prints
    it): the k rounds, the most the extra starts may take, how the looks split the false-claim rate, and what a
    confirmation costs."""
    starts = profile.bench.verdicts.starts
    budget = profile.bench.verdicts.decide_budget_s
    judged = judged_start_seconds(profile)
    if looks(profile) > 1:
        first, last = look_rates(profile)
        more = (f"; at most {minutes(budget)} more (bench.verdicts.decide_budget_s) for extra starts of the judged "
                f"cells where a verdict cannot tell (two looks at false-claim rates {first:.2g} then {last:.2g}, "
                "O'Brien-Fleming-like)")
    elif budget:
        more = (f"; no extra starts: a round of the start and one recipe (about {minutes(2 * judged)}) costs more "
                f"than bench.verdicts.decide_budget_s ({minutes(budget)})")
    else:
        more = ""
    return (f"plan: {len(names)} recipes x {starts} starts = {cost_words(profile, len(names) * starts)}, in "
            f"{starts} interleaved round{'s' if starts != 1 else ''}{more}; about {minutes(2 * starts * judged)} "
            f"more ({2 * starts} starts of the judged cells) to confirm a recipe judged better")


def extra_rounds(profile: Profile, names: int) -> int:
    """Rounds of more starts of ``names`` recipes (the start among them) that ``bench.verdicts.decide_budget_s``
    affords by the plan's estimate of one start benching the judged cells (rigforge.bench_runs.starts.
    judged_start_seconds): the most a tournament measures after its k rounds (fewer where the rig's measured
    starts are slower than the estimate).

    + profile: the rig's profile
    + names: recipes in each extra round, the start among them

    Example::

        extra_rounds(load_profile("sandbox"), 2)     # 5: a start estimated at 50 s, 500 s of budget: 2 x 50 s fit 5 x
    """
    per_round = judged_start_seconds(profile) * max(names, 1)
    return int(profile.bench.verdicts.decide_budget_s // per_round) if per_round > 0 else 0


def looks(profile: Profile) -> int:
    """How often a tournament on the profile judges: 2 when its budget affords a round of the start and one recipe
    (``extra_rounds(profile, 2) >= 1``), else 1. Fixed by the profile, before anything is measured."""
    return 2 if extra_rounds(profile, 2) >= 1 else 1


def look_rates(profile: Profile, rate: float | None = None) -> tuple[float, ...]:
    """The false-claim rate each look tests at, first to last; they add up to ``bench.verdicts.false_claim_rate``.
    One look: the whole rate. Two: the first gets the O'Brien-Fleming-like spend at the planned information
    fraction t = k / (k + extra_rounds(profile, 2)), 2 - 2 Phi(z(1 - rate/2) / sqrt t), the last the rest. Fixed by
    the profile before anything is measured; fewer extra rounds than planned leave the split as it is (the sum is
    what keeps the rate).

    + profile: the rig's profile
    + rate: the rate to split (default: the profile's ``bench.verdicts.false_claim_rate``)

    Example::

        look_rates(load_profile("sandbox"))      # (0.0014, 0.0486): k = 3, at most 5 extra rounds, t = 3/8
    """
    rate = profile.bench.verdicts.false_claim_rate if rate is None else rate
    if looks(profile) == 1:
        return (rate,)
    starts = profile.bench.verdicts.starts
    fraction = starts / (starts + extra_rounds(profile, 2))
    normal = NormalDist()
    first = 2.0 * (1.0 - normal.cdf(normal.inv_cdf(1.0 - rate / 2.0) / math.sqrt(fraction)))
    return (first, rate - first)


def per_look(policy: RegressionPolicy, profile: Profile, look: int = 1) -> RegressionPolicy:
    """The policy look ``look`` (1: after the k rounds, 2: after the extra rounds) judges with: its share of the
    profile's false-claim rate (``look_rates``; the chance of a false claim at any look is at most their sum).

    + policy: the comparison's policy (RegressionPolicy.from_profile)
    + profile: the rig's profile (its budget says how many looks)
    + look: which look, 1 or 2
    """
    rates = look_rates(profile, policy.false_claim_rate)
    return replace(policy, false_claim_rate=rates[min(look, len(rates)) - 1])
