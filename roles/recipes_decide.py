"""The recipe tournament's rounds of engine starts, the extra rounds where a verdict made no claim (within the
profile's ``bench.verdicts.decide_budget_s``, judged in two looks: rigforge/recipes/rounds.py), and its report
files.

Called by roles/recipes.py while the experiment executes (nested operations): every start of a recipe is a trial
(switch, a fresh engine start, health wait, probes and bench); its result joins the recipe's earlier starts, and a
start that fails disqualifies the recipe, naming the start. The order of the rounds is rigforge/recipes/rounds.py's.
Once the k rounds have taken the full pass, the extra rounds' and the confirmation's starts bench only the judged
cells (rigforge/bench_runs/starts.py: ``judged_profile``), the only cells a verdict reads more starts of.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pyinfra import host, logger

from rigforge.bench_runs.starts import judged_profile, minutes
from rigforge.profile import Profile
from rigforge.recipes.plot import render_report_plot
from rigforge.recipes.quality_plot import render_quality_plot
from rigforge.recipes.report import Report, Trial, best_of, build_report, confirm, report_json, report_markdown
from rigforge.recipes.rounds import extra_rounds, look_rates, looks, per_look, round_orders
from rigforge.updates.policy import RegressionPolicy
from rigforge.updates.verdict import BETTER, CANNOT_TELL, SAME, WORSE

#: A trial runner: (recipe profile, the recipe before it) -> the trial of one engine start.
TryRecipe = Callable[[Profile, Profile | None], Trial]


def add_start(trial: Trial | None, start: Trial, number: int) -> Trial:
    """A recipe's trial with one more engine start: its result joins the earlier ones; a start that failed
    disqualifies the recipe, naming which start it was (its other starts measured it, so it comes up at times).

    >>> first = Trial("r", "d", "s", {"cells": []}, "run/1")
    >>> len(add_start(first, Trial("r", "d", "s", {"cells": []}, "run/2"), 2).starts)
    2
    >>> add_start(first, Trial("r", "d", "s", None, None, "did not come up: x"), 2).disqualified
    'start 2: did not come up: x'
    """
    if trial is None:
        return start
    if trial.disqualified:
        return trial
    if start.disqualified or start.result is None:
        return replace(trial, disqualified=f"start {number}: {start.disqualified or 'no result'}")
    return replace(trial, later=(*trial.later, start.result))


@dataclass
class Tournament:
    """The recipes' starts so far, measured one after the other on the rig.

    + profile: the rig's profile, no recipe applied
    + try_recipe: measures one start of a recipe
    + stopped: asked before each start (the recipe's name); True stops the tournament (Ctrl-C)
    + trying: called before each start with the recipe's name (the experiment record says it)
    """

    profile: Profile
    try_recipe: TryRecipe
    stopped: Callable[[str], bool]
    trying: Callable[[str], None]
    trials: dict[str, Trial] = field(default_factory=dict)
    rounds: list[list[str]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)  # each start's wall time: switch, start, health, bench
    previous: Profile | None = None
    judged_only: bool = False  # bench only the judged cells (the extra rounds, the confirmation)

    def measure(self, name: str) -> bool:
        """One start of ``name``, added to its trial; False when stopped before it."""
        if self.stopped(name):
            return False
        self.trying(name)
        number = len(self.trials[name].starts) + 1 if name in self.trials else 1
        recipe = self.profile.with_recipe(name)
        recipe = judged_profile(recipe) if self.judged_only else recipe
        began = time.monotonic()
        start = self.try_recipe(recipe, self.previous)
        self.seconds.append(time.monotonic() - began)
        self.previous = recipe
        self.trials[name] = add_start(self.trials.get(name), start, number)
        self.rounds[-1].append(name)
        host.log(f"recipes: {name}, start {number}: " + (f"DISQUALIFIED: {start.disqualified}" if start.disqualified
                                                         else f"measured ({start.run_dir})"),
                 logger.warning if start.disqualified else logger.info)
        return True

    def run_round(self, names: list[str]) -> bool:
        """One start of each recipe in ``names`` still measured, in that order; False when stopped."""
        self.rounds.append([])
        for name in names:
            if name in self.trials and self.trials[name].disqualified:
                continue
            if not self.measure(name):
                return False
        return True

    def run(self, names: list[str], seed: str) -> bool:
        """The profile's rounds (k starts of each recipe, interleaved); a start that cannot be measured in round 1
        ends the tournament there (nothing to compare with). False when stopped."""
        orders = round_orders(names, self.profile.bench.verdicts.starts, seed)
        host.log(f"recipes: {len(orders)} rounds, rounds 2.. shuffled with seed {seed}: "
                 + "; ".join(" ".join(order) for order in orders))
        for number, order in enumerate(orders, start=1):
            if number > 1 and self.trials[names[0]].disqualified:
                break
            if not self.run_round(order):
                return False
        return True

    @property
    def start_seconds(self) -> float:
        """What one start cost on this run (the median of those measured)."""
        return statistics.median(self.seconds) if self.seconds else 0.0


def decide_more(report: Report, tournament: Tournament, seed: str) -> list[str]:
    """Rounds of more starts of the starting recipe and every recipe the report makes no claim about (``cannot
    tell``, or a first look's ``same``, which is not final), each round shuffled, each start benching only the
    judged cells: never more than the plan's count for that many recipes (rigforge.recipes.rounds.extra_rounds, by
    the plan's estimate of a start), and only while the rounds measured so far leave room in the budget at this
    run's measured start time. So how many are measured depends on which recipes the first look left open and on
    the rig's real wall time; the most is fixed by the profile. What was spent, in words.

    + report: the report of the rounds so far (the first look)
    + tournament: the tournament that measured them (more starts join its trials)
    + seed: the shuffle's seed (the experiment's stamp)
    """
    budget = float(tournament.profile.bench.verdicts.decide_budget_s)
    open_ = [verdict for verdict in report.verdicts if verdict.verdict in (CANNOT_TELL, SAME)]
    if not open_ or budget <= 0:
        return []
    names = [report.start, *(verdict.recipe for verdict in open_)]
    planned = extra_rounds(tournament.profile, len(names))
    per_round = tournament.start_seconds * len(names)
    affordable = min(planned, int(budget // per_round) if per_round else planned)
    sized = [verdict.starts_to_decide for verdict in open_ if verdict.starts_to_decide]
    have = len(tournament.trials[report.start].starts)
    said = (f"{', '.join(names[1:])}: no claim after {have} starts a side"
            + (f" (about {max(sized)} would decide)" if sized else "")
            + f"; a round of {len(names)} starts costs about {minutes(per_round)} here")
    if affordable < 1:
        return [f"{said}, more than the {budget:.0f} s budget (bench.verdicts.decide_budget_s) affords"]
    began, rounds = time.monotonic(), 0
    tournament.judged_only = True
    for order in round_orders(names, affordable + 1, f"{seed}-more")[1:]:
        if time.monotonic() - began + per_round > budget or not tournament.run_round(order):
            break
        rounds += 1
    spent = time.monotonic() - began
    return [f"{said}: measured {rounds} more round{'s' if rounds != 1 else ''} ({rounds * len(names)} starts), "
            f"{spent:.0f} s of the {budget:.0f} s budget (bench.verdicts.decide_budget_s); judged again at the "
            f"last look's false-claim rate ({look_rates(tournament.profile)[-1]:.2g})"]


def judge_in_looks(tournament: Tournament, start: str, policy: RegressionPolicy, seed: str) -> Report:
    """The tournament's report after one or two looks (rigforge/recipes/rounds.py says when and why): the first
    after the k rounds; where the profile's budget affords more rounds, a second after them, where a claim of the
    first look stays and every other recipe is judged on all its starts. Each look judges at ``per_look``'s rate.

    + tournament: the tournament, its k rounds measured
    + start: the starting recipe
    + policy: the comparison's policy (the start's)
    + seed: the shuffle's seed (the experiment's stamp)
    """
    first = build_report(list(tournament.trials.values()), start, per_look(policy, tournament.profile, 1), (),
                         tournament.rounds)
    if looks(tournament.profile) == 1:
        return first
    spent = decide_more(first, tournament, seed)
    last = per_look(policy, tournament.profile, 2)
    final = build_report(list(tournament.trials.values()), start, last, spent, tournament.rounds)
    return keep_first_claims(first, final, last)


def keep_first_claims(first: Report, final: Report, policy: RegressionPolicy) -> Report:
    """``final`` with every better/worse claim of ``first`` kept as it was made (a claim is not tested again:
    that would be one more chance for a false one), and its best chosen again.

    + first: the first look's report
    + final: the report on all starts (the second look)
    + policy: the policy the looks judged with (its primary's direction picks the best)
    """
    claims = {verdict.recipe: verdict for verdict in first.verdicts if verdict.verdict in (BETTER, WORSE)}
    verdicts = tuple(claims.get(verdict.recipe, verdict) for verdict in final.verdicts)
    return replace(final, verdicts=verdicts, best=best_of(verdicts, policy))


def confirm_best(report: Report, tournament: Tournament, policy: RegressionPolicy, seed: str) -> Report | None:
    """The report whose ``best`` replicated: before the report says ``better`` (and keep=best moves the rig), the
    start and the best are measured again in k new engine starts each, in freshly shuffled rounds, and the best
    must be judged ``better`` again on those starts alone. A claim made by one unlucky run of starts (a
    neighbour's load, a slow boot) rarely repeats itself in an independent run, so a false claim needs two in a
    row; a real gain repeats. When it does not replicate, the recipe's verdict says so and nothing is kept. None
    when stopped (Ctrl-C) before the end.

    + report: the tournament's report, with a ``best``
    + tournament: the tournament that measured it (its rig, runner and the recipe the rig runs now)
    + policy: the comparison's policy (the start's)
    + seed: the shuffle's seed (the experiment's stamp)
    """
    if report.best is None:
        return report
    best, starts = report.best, tournament.profile.bench.verdicts.starts
    again = Tournament(tournament.profile, tournament.try_recipe, tournament.stopped, tournament.trying,
                       previous=tournament.previous, judged_only=True)
    host.log(f"recipes: {best} judged better than {report.start}: {starts} more starts each to confirm it")
    for order in round_orders([report.start, best], starts + 1, f"{seed}-confirm")[1:]:
        if not again.run_round(order):
            return None
    tournament.previous = again.previous
    tournament.seconds.extend(again.seconds)
    confirmed = next(verdict for verdict in build_report(list(again.trials.values()), report.start, policy).verdicts
                     if verdict.recipe == best)
    if confirmed.verdict == BETTER:
        line = f"{best}: better again in {starts} new starts a side ({confirmed.detail})"
        return confirm(report, best, line)
    line = (f"{best}: judged better, but not again in {starts} new starts a side ({confirmed.verdict}: "
            f"{confirmed.detail}); nothing kept")
    verdicts = tuple(replace(verdict, verdict=CANNOT_TELL, detail=f"not confirmed: {line}; first: {verdict.detail}")
                     if verdict.recipe == best else verdict for verdict in report.verdicts)
    return replace(report, verdicts=verdicts, best=None, spent=(*report.spent, line))


def write_report(report: Any, folder: Path, host_name: str, stamp: str) -> Path:
    """report.json, report.md and report.png in ``folder`` (each written whole, then renamed)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("report.json", json.dumps(report_json(report, host_name, stamp), indent=1) + "\n"),
                       ("report.md", report_markdown(report, host_name, stamp))):
        temporary = folder / f".{name}.new"
        temporary.write_text(text)
        temporary.replace(folder / name)
    render_report_plot(report, folder / "report.png", f"{host_name} recipes {stamp}")
    render_quality_plot(report, folder / "quality.png", f"{host_name} recipes {stamp}")
    return folder
