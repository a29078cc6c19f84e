"""The engine start as the unit of a tournament: interleaved rounds (rigforge/recipes/rounds.py), the cost said
before anything is measured (rigforge/bench_runs/starts.py), and the tournament's runner (roles/recipes_decide.py)
with a stand-in for one measured start (a function returning a Trial: no rig here, labelled as such)."""

from __future__ import annotations

from typing import Any

import pytest

from rigforge.bench_runs.starts import bench_seconds, cost_words, minutes, start_seconds
from rigforge.profile import Profile
from rigforge.profile.loader import load_profile
from rigforge.recipes.report import BETTER, CANNOT_TELL, SAME, WORSE, RecipeVerdict, Report, Trial, build_report
from rigforge.recipes.rounds import extra_rounds, look_rates, looks, per_look, plan_line, round_orders
from roles import recipes_decide
from roles.recipes_decide import Tournament, add_start, confirm_best, decide_more, judge_in_looks, keep_first_claims
from tests.unit.test_promises_recipe_report import POLICY, measured

NAMES = ["default", "one-slot", "rope-broken", "one-thread"]  # the sandbox profile's recipes


class Logged:
    """Stands in for pyinfra's host in the runner's log lines (the runner runs inside a deploy)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, line: str, *_: Any) -> None:
        self.lines.append(line)


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> Logged:
    host = Logged()
    monkeypatch.setattr(recipes_decide, "host", host)
    return host


def profile(starts: int = 3, budget: int = 120) -> Profile:
    sandbox = load_profile("sandbox")
    verdicts = sandbox.bench.verdicts.model_copy(update={"starts": starts, "decide_budget_s": budget})
    return sandbox.model_copy(update={"bench": sandbox.bench.model_copy(update={"verdicts": verdicts})})


def fake_start(failing: dict[tuple[str, int], str] | None = None):  # noqa: ANN201 - a TryRecipe
    """A stand-in for one measured start: a result naming the recipe and its start, or a failure."""
    counts: dict[str, int] = {}

    def measure(recipe: Profile, before: Profile | None) -> Trial:
        name = recipe.engine.recipe or ""
        counts[name] = counts.get(name, 0) + 1
        reason = (failing or {}).get((name, counts[name]), "")
        result = None if reason else {"cells": [], "start": counts[name]}
        return Trial(name, "d", "s", result, f"results/h/{name}-{counts[name]}", reason)

    return measure


def test_round_one_keeps_the_order_and_later_rounds_are_shuffled_by_the_seed() -> None:
    orders = round_orders(NAMES, 3, "20261127T060000Z")
    assert orders[0] == NAMES and all(sorted(order) == sorted(NAMES) for order in orders)
    assert orders == round_orders(NAMES, 3, "20261127T060000Z")  # the seed tells the order again
    seeds = [round_orders(NAMES, 2, str(seed))[1] for seed in range(20)]
    assert len({tuple(order) for order in seeds}) > 5  # shuffled, not rotated
    assert {order[0] for order in seeds} == set(NAMES)  # the start is not always first
    assert round_orders(NAMES, 1, "s") == [NAMES]


def test_the_plan_says_starts_cells_and_minutes_from_the_profile() -> None:
    sandbox = load_profile("sandbox")
    assert bench_seconds(sandbox) == 3 * 2 * 5 * 1.5 and start_seconds(sandbox) == 5 + 45
    assert plan_line(sandbox, NAMES) == (  # minutes, not start counts (issue 49)
        "plan: 4 recipes x 3 starts = 12 engine starts of 3 cells x 2 repeats; about 10 min (a start: 5 s to "
        "healthy, bench.verdicts.engine_start_s, + 45 s of bench), in 3 interleaved rounds; at most 9 min more "
        "(bench.verdicts.decide_budget_s) for extra starts of the judged cells where a verdict cannot tell (two "
        "looks at false-claim rates 0.0014 then 0.049, O'Brien-Fleming-like); about 5 min more (6 starts of the "
        "judged cells) to confirm a recipe judged better")
    assert "no extra starts: a round of the start and one recipe (about 64 min) costs more than " \
        "bench.verdicts.decide_budget_s (15 min)" in plan_line(load_profile("2x-pix"), NAMES)
    assert cost_words(profile(budget=0), 1).startswith("1 engine start of 3 cells")
    assert "for extra starts" not in plan_line(profile(budget=0), NAMES)
    assert (minutes(59.0), minutes(61.0)) == ("59 s", "2 min")


def test_every_recipe_gets_k_starts_in_interleaved_rounds(logged: Logged) -> None:
    tournament = Tournament(profile(), fake_start(), lambda name: False, lambda name: None)
    assert tournament.run(NAMES, "seed")
    assert tournament.rounds == round_orders(NAMES, 3, "seed")
    assert all(len(tournament.trials[name].starts) == 3 for name in NAMES)
    assert [result["start"] for result in tournament.trials["one-slot"].starts] == [1, 2, 3]
    assert len(tournament.seconds) == 12
    assert logged.lines[0].startswith("recipes: 3 rounds, rounds 2.. shuffled with seed seed: default one-slot "
                                      "rope-broken one-thread; ")
    assert "recipes: one-slot, start 3: measured (results/h/one-slot-3)" in logged.lines


def test_a_recipe_failing_in_a_later_start_is_disqualified_naming_it_and_not_measured_again(logged: Logged) -> None:
    tournament = Tournament(profile(), fake_start({("rope-broken", 2): "wrong output: probe_capital: x"}),
                            lambda name: False, lambda name: None)
    assert tournament.run(NAMES, "seed")
    assert tournament.trials["rope-broken"].disqualified == "start 2: wrong output: probe_capital: x"
    assert "rope-broken" not in tournament.rounds[2] and len(tournament.trials["rope-broken"].starts) == 1


def test_a_start_that_cannot_be_measured_ends_the_tournament_after_round_one(logged: Logged) -> None:
    tournament = Tournament(profile(), fake_start({("default", 1): "did not come up: x"}), lambda name: False,
                            lambda name: None)
    assert tournament.run(NAMES, "seed") and tournament.rounds == [NAMES]


def test_ctrl_c_stops_before_the_next_start(logged: Logged) -> None:
    seen: list[str] = []
    tournament = Tournament(profile(), fake_start(), lambda name: len(seen) >= 5, seen.append)
    assert not tournament.run(NAMES, "seed") and len(seen) == 5


def test_add_start_keeps_the_first_failure() -> None:
    first = Trial("r", "d", "s", None, None, "did not come up: x")
    assert add_start(first, Trial("r", "d", "s", {"cells": []}), 2) is first
    assert add_start(None, first, 1) is first


def report(*undecided: tuple[str, int | None]) -> Report:
    verdicts = [RecipeVerdict("default", "start", "")]
    verdicts += [RecipeVerdict(name, CANNOT_TELL, "x", starts_to_decide=needed) for name, needed in undecided]
    verdicts.append(RecipeVerdict("rope-broken", SAME, "x"))
    return Report((), "default", tuple(verdicts), None)


def test_the_budget_fixes_the_extra_rounds_and_the_looks_before_anything_is_measured() -> None:
    sandbox = load_profile("sandbox")  # a start estimated at 50 s, 500 s of budget
    assert [extra_rounds(sandbox, names) for names in (1, 2, 3, 4)] == [10, 5, 3, 2]
    assert looks(sandbox) == 2
    # the two looks' rates add up to the profile's, most of it at the last look (O'Brien-Fleming-like at t = 3/8)
    first, last = look_rates(sandbox)
    assert first + last == pytest.approx(POLICY.false_claim_rate) and first < 0.1 * last
    assert (per_look(POLICY, sandbox, 1).false_claim_rate, per_look(POLICY, sandbox, 2).false_claim_rate) == (first,
                                                                                                               last)
    assert looks(profile(budget=99)) == 1  # not even a round of the start and one recipe (2 x 50 s)
    assert looks(profile(budget=100)) == 2
    assert looks(profile(budget=0)) == 1 and per_look(POLICY, profile(budget=0)) == POLICY
    for gpu in ("2x-pix", "4x-threadripper", "8x-turin"):  # a start costs more than the budget: one look
        assert looks(load_profile(gpu)) == 1


def test_every_recipe_without_a_claim_gets_the_budgets_rounds_of_more_starts(logged: Logged) -> None:
    tournament = Tournament(profile(budget=1000), fake_start(), lambda name: False, lambda name: None)
    tournament.run(NAMES, "seed")
    tournament.seconds = [10.0] * 12  # a start took 10 s on this run: a round of 3 starts costs 30 s
    lines = decide_more(report(("one-slot", 5)), tournament, "seed")
    # The plan's count caps the rounds (1000 s // (3 x 50 s) = 6), though the measured 30 s would afford 33.
    assert [sorted(order) for order in tournament.rounds[3:]] == [["default", "one-slot", "rope-broken"]] * 6
    assert len(tournament.trials["one-slot"].starts) == 9 and len(tournament.trials["one-thread"].starts) == 3
    assert lines[0].startswith("one-slot, rope-broken: no claim after 3 starts a side (about 5 would decide); a "
                               "round of 3 starts costs about 30 s here: measured 6 more rounds (18 starts), ")
    assert lines[0].endswith(" of the 1000 s budget (bench.verdicts.decide_budget_s); judged again at the last "
                             f"look's false-claim rate ({look_rates(tournament.profile)[-1]:.2g})")


def test_the_measured_cost_of_a_start_can_only_lower_the_count(logged: Logged) -> None:
    tournament = Tournament(profile(budget=1000), fake_start(), lambda name: False, lambda name: None)
    tournament.run(NAMES, "seed")
    tournament.seconds = [200.0] * 12  # slower than the plan's 50 s: 1000 s // 600 s = 1 round
    decide_more(report(("one-slot", None), ("one-thread", None)), tournament, "seed")
    assert len(tournament.rounds) == 4


def test_a_budget_too_small_for_a_round_says_so_and_measures_nothing(logged: Logged) -> None:
    tournament = Tournament(profile(budget=15), fake_start(), lambda name: False, lambda name: None)
    tournament.run(NAMES, "seed")
    tournament.seconds = [10.0] * 12
    assert decide_more(report(("one-slot", 9), ("one-thread", 4)), tournament, "seed") == [
        "one-slot, one-thread, rope-broken: no claim after 3 starts a side (about 9 would decide); a round of 4 "
        "starts costs about 40 s here, more than the 15 s budget (bench.verdicts.decide_budget_s) affords"]
    assert len(tournament.rounds) == 3
    claims_only = Report((), "default", (RecipeVerdict("default", "start", ""), RecipeVerdict("x", WORSE, "")), None)
    assert decide_more(claims_only, tournament, "seed") == []  # every recipe claimed: nothing to buy
    assert decide_more(report(("one-slot", 9)), Tournament(profile(budget=0), fake_start(), lambda name: False,
                                                      lambda name: None), "seed") == []


def test_a_first_look_claim_stays_and_is_not_tested_again(logged: Logged) -> None:
    claim = RecipeVerdict("fast", BETTER, "first", primary=9.0)
    first = Report((), "default", (RecipeVerdict("default", "start", ""), claim,
                                   RecipeVerdict("aa1", SAME, "first")), "fast")
    final = Report((), "default", (RecipeVerdict("default", "start", ""), RecipeVerdict("fast", CANNOT_TELL, "again"),
                                   RecipeVerdict("aa1", CANNOT_TELL, "final")), None)
    kept = keep_first_claims(first, final, POLICY)
    assert [verdict.detail for verdict in kept.verdicts] == ["", "first", "final"] and kept.best == "fast"
    # aa1's first-look same is not final: the second look's verdict stands (one equivalence test a recipe).
    assert keep_first_claims(final, first, POLICY).verdicts[2].verdict == SAME


def test_two_looks_measure_more_starts_of_the_unclaimed_only(logged: Logged) -> None:
    speeds = {"default": [1.0] * 9, "one-slot": [1.0] * 9, "one-thread": [0.5] * 9}
    tournament = Tournament(profile(budget=150), scripted_starts(speeds), lambda name: False, lambda name: None)
    tournament.run(list(speeds), "seed")
    tournament.seconds = [10.0] * 9
    final = judge_in_looks(tournament, "default", POLICY, "seed")
    verdicts = {verdict.recipe: verdict.verdict for verdict in final.verdicts}
    assert verdicts["one-thread"] == WORSE and len(tournament.trials["one-thread"].starts) == 3  # claimed at look 1
    assert len(tournament.trials["one-slot"].starts) == 4 and len(tournament.trials["default"].starts) == 4
    assert verdicts["one-slot"] == SAME and final.spent and final.best is None
    # One look where the budget affords no round: nothing more measured.
    tournament = Tournament(profile(budget=0), scripted_starts(speeds), lambda name: False, lambda name: None)
    tournament.run(list(speeds), "seed")
    assert judge_in_looks(tournament, "default", POLICY, "seed").spent == () and len(tournament.rounds) == 3


def scripted_starts(speeds: dict[str, list[float]]):  # noqa: ANN201 - a TryRecipe
    """A stand-in for measured starts: each recipe's n-th start decodes at ``speeds[name][n]`` times the start's
    speed (one result of rigforge's own shape, three starts ±0.1 % apart), no rig involved."""
    counts: dict[str, int] = {}

    def measure(recipe: Profile, before: Profile | None) -> Trial:
        name = recipe.engine.recipe or ""
        number = counts.get(name, 0)
        counts[name] = number + 1
        return Trial(name, "d", "s", measured(speeds[name][number], 1.0)[number % 3], f"results/h/{name}-{number}")
    return measure


def tournament_of(speeds: dict[str, list[float]]) -> tuple[Tournament, Report]:
    tournament = Tournament(profile(budget=0), scripted_starts(speeds), lambda name: False, lambda name: None)
    tournament.run(list(speeds), "seed")
    return tournament, build_report(list(tournament.trials.values()), "default", POLICY, (), tournament.rounds)


def test_keep_best_moves_the_rig_only_on_a_claim_that_replicates_in_new_starts(logged: Logged) -> None:
    # Three lucky starts (+30 %), then three like the start's: the claim does not repeat, nothing is kept.
    tournament, first = tournament_of({"default": [1.0] * 6, "one-thread": [1.3] * 3 + [1.0] * 3})
    assert first.best == "one-thread"
    confirmed = confirm_best(first, tournament, POLICY, "seed")
    assert confirmed is not None and confirmed.best is None and len(tournament.seconds) == 12
    verdict = next(verdict for verdict in confirmed.verdicts if verdict.recipe == "one-thread")
    assert verdict.verdict == CANNOT_TELL and verdict.detail.startswith("not confirmed: one-thread: judged better, "
                                                                        "but not again in 3 new starts a side (")
    assert confirmed.spent[-1].endswith("; nothing kept")
    # A real gain repeats itself: kept, and the report says it was confirmed.
    tournament, first = tournament_of({"default": [1.0] * 6, "one-thread": [1.3] * 6})
    confirmed = confirm_best(first, tournament, POLICY, "seed")
    assert confirmed is not None and confirmed.best == "one-thread"
    assert confirmed.spent[-1].startswith("one-thread: better again in 3 new starts a side (")
    # Nothing judged better: nothing measured again.
    tournament, first = tournament_of({"default": [1.0] * 3, "one-thread": [1.0] * 3})
    assert confirm_best(first, tournament, POLICY, "seed") is first and len(tournament.seconds) == 6


def test_ctrl_c_during_the_confirmation_stops_the_experiment(logged: Logged) -> None:
    tournament, first = tournament_of({"default": [1.0] * 6, "one-thread": [1.3] * 6})
    tournament.stopped = lambda name: True
    assert confirm_best(first, tournament, POLICY, "seed") is None
