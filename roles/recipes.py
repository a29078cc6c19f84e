"""Recipes role: try a rig's engine recipes in interleaved rounds of engine starts, and leave the rig as it was.

Each recipe is measured in ``bench.verdicts.starts`` (k) engine starts of its own: k rounds, the starting recipe
first in round 1 (the baseline), later rounds shuffled (rigforge/recipes/rounds.py), so drift during the run lands
on every recipe. A start is a switch — its image (built only when no image of its inputs is on the rig), its
checkpoint (kept beside the others'), its unit — or, when nothing changed, a restart; then the health wait, the
sanity probes and the profile's cells, recorded in the bench history under the recipe's name. A recipe that does
not come up, gives wrong output or an error, logs a known failure of severity ``fail``, or whose engine reports at
start that it chose otherwise than the recipe's ``startup`` promises ("runs X, not Y":
rigforge/recipes/startup.py), in any of its starts, is disqualified with the reason. The verdicts compare one
value per start (rigforge/recipes/report.py); where one cannot tell, more rounds of the start and the undecided
recipes run within ``bench.verdicts.decide_budget_s`` (roles/recipes_decide.py). Then the rig runs its starting
recipe again; with ``--data keep=best`` the recipe judged ``better`` on the primary metric. The report (JSON,
Markdown, PNG) lands in ``results/<host>/recipes-<stamp>/`` and its table is printed.

While it runs, ``/var/lib/rigforge/recipe-experiment.json`` says so; Ctrl-C or a lost connection leaves it, and
the next deploy on the rig puts the starting recipe back (roles/takeover.py), saying so. The rig's own record of
its recipe (/etc/rigforge/profile.json) changes only with keep=best.

The trials run while the deploy executes, as nested operations: what a trial does depends on how the one before
ended. ``--dry`` prints what each recipe would need and the plan: starts, cells and minutes.
"""

from __future__ import annotations

import json
import posixpath
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pyinfra import host, logger, state
from pyinfra.api import deploy, operation
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS
from pyinfra.api.exceptions import NestedOperationError
from pyinfra.facts.server import Command

from rigforge.bench_runs.plan import results_root, run_stamp
from rigforge.checks.known_failures import find_known_failures
from rigforge.context import RunSettings, base_profile, current_recipe_choice
from rigforge.facts.images import DockerImageId
from rigforge.facts.logs import FailureLogs, KnownFailureLogs
from rigforge.facts.startup import EngineStartupRecord
from rigforge.facts.weights import HubSize, WeightsOnDisk
from rigforge.fleet.image_commits import rig_git_refs
from rigforge.known_failures import hit_line
from rigforge.operations.files import managed_file
from rigforge.operations.nested import ctrl_c_pressed, nested_flow, watch_ctrl_c
from rigforge.operations.weights import GB, bytes_to_fetch, hub_size, tool_command
from rigforge.profile import Model, Profile
from rigforge.profile.loader import ProfileError
from rigforge.recipes.choice import EXPERIMENT_RECORD, RecipeChoice
from rigforge.recipes.report import Trial, report_table, starts_lines, wrong_output
from rigforge.recipes.rounds import plan_line as rounds_plan
from rigforge.recipes.startup import startup_verdict
from rigforge.render import header_text
from rigforge.serving.engines import image_ref
from rigforge.updates.comparison import RegressionPolicy
from roles import base, bench, drain, engine, images, recipes_decide, service, weights
from roles.weights import HF_TOKEN_FILE, HF_VENV, WEIGHTS_TOOL


def trial_order(profile: Profile, start: str, wanted: list[str]) -> list[str]:
    """The recipes to try, the starting one first (it is the baseline); an unknown name stops the run (pure).

    + profile: the rig's profile, no recipe applied
    + start: the recipe the rig runs now
    + wanted: ``--data recipes=a,b`` as names; empty: all of the profile's
    """
    unknown = [name for name in wanted if name not in profile.engine.recipes]
    if unknown:
        raise ProfileError(f"--data recipes={','.join(wanted)}: no recipe {unknown[0]!r} in profile {profile.name}; "
                           f"engine.recipes: {', '.join(profile.recipe_names)}")
    names = wanted or profile.recipe_names
    return [start, *(name for name in dict.fromkeys(names) if name != start)]


@deploy("Recipes")
def apply_recipes(settings: RunSettings) -> None:
    """Try the recipes ``settings.recipes`` names (default: all), then leave the rig on its start (or the best)."""
    profile = base_profile()
    if not profile.engine.recipes:
        raise ProfileError(f"profile {profile.name} defines no engine.recipes: nothing to try")
    start = current_recipe_choice().name
    assert start is not None
    names = trial_order(profile, start, settings.recipe_list)
    stamp = run_stamp(datetime.now(timezone.utc))
    plans = {name: profile.with_recipe(name) for name in names}
    for line in [*plan_lines(plans, start), f"recipes: {rounds_plan(profile, names)}"]:
        host.log(line)
    checkpoints_fit(name="Check that every recipe's checkpoint fits on the disk", profiles=list(plans.values()))
    bench.install_client(plans[start])
    managed_file(name=f"Record the experiment in {EXPERIMENT_RECORD}", dest=EXPERIMENT_RECORD,
                 content=experiment_record(profile, stamp, start, names, None))
    drain.take_out(profile, "recipe tournament", "the tournament ends on its final recipe, healthy",
                   settings.drain_last)
    try_recipes(name=f"Try {len(names)} recipes: {', '.join(names)}", profile=profile, names=names, start=start,
                keep=settings.keep, stamp=stamp, results_dir=str(results_root()))
    # Once the rig runs its final recipe, healthy, that recipe benched in every round; a tournament that fails (no
    # recipe passed, Ctrl-C) fails before this and leaves the rig out of rotation.
    drain.put_back(profile, "it runs its final recipe, healthy, benched in the tournament")


def experiment_record(profile: Profile, stamp: str, start: str, names: list[str], trying: str | None) -> str:
    """The experiment record's text (JSON, with the managed-by marker that lets a later run remove it)."""
    record = {"_managed_by": header_text(profile), "stamp": stamp, "starting": start, "recipes": names,
              "trying": trying}
    return json.dumps(record, indent=1) + "\n"


def plan_lines(plans: dict[str, Profile], start: str) -> list[str]:
    """What each recipe needs on this rig before it can be measured: an image built or pulled, weights fetched."""
    lines = []
    for name, profile in plans.items():
        needs = []
        image = image_ref(profile) if profile.engine.native is None else None
        unresolved = [arg for arg, ref in rig_git_refs(host, profile).items() if not ref["commit"]]
        if profile.engine.build is not None and unresolved:
            needs.append(f"an image build of {profile.engine.build.dockerfile} (its git refs resolved first)")
        elif image and not host.get_fact(DockerImageId, ref=image):
            needs.append(f"image {image} ({'build' if profile.engine.build else 'pull'})")
        listed = hub_listing(profile.model)
        missing = bytes_to_fetch(profile.model, host.get_fact(WeightsOnDisk, path=profile.model.path),
                                 listed.size if listed else None)
        if missing:
            said = f" (size from {listed.said})" if listed else ""
            needs.append(f"{missing / GB:.1f} GB of weights into {profile.model.path}{said}")
        role = "start, measured first" if name == start else "then"
        lines.append(f"recipes: {name} ({role}): {', '.join(needs) or 'nothing to fetch or build'}")
    return lines


def hub_listing(model: Model) -> HubSize | None:
    """The hub's size of a huggingface checkpoint's revision, asked on the rig (None for other sources)."""
    if model.source != "huggingface":
        return None
    return hub_size(model, f"{HF_VENV}/bin/python", WEIGHTS_TOOL, HF_TOKEN_FILE)


@operation()
def checkpoints_fit(profiles: list[Profile]):
    """
    Fail before the first trial unless every checkpoint still to fetch fits on the disk at once.

    + profiles: the recipes' profiles (checkpoints with the same path counted once)

    **Example:**

    .. code:: python

        checkpoints_fit(name="Check the checkpoints fit", profiles=[p.with_recipe(n) for n in names])
    """
    models = {profile.model.path: profile.model for profile in profiles}
    listed = {path: hub_listing(model) for path, model in models.items()}
    need = sum(bytes_to_fetch(model, host.get_fact(WeightsOnDisk, path=path),
                              listed[path].size if listed[path] else None) for path, model in models.items())
    if not need:
        host.noop(f"{len(models)} checkpoint(s) already on the rig")
        return
    root = posixpath.dirname(next(iter(models)).rstrip("/"))
    yield tool_command("python3", WEIGHTS_TOOL, "check-space", "--path", root, "--need", need)


# _set_in_op=False (as pyinfra's python.call): the trials' operations, called while this one executes, run as
# nested operations, executed at once.
@operation(is_idempotent=False, _set_in_op=False)
def try_recipes(profile: Profile, names: list[str], start: str, keep: str, stamp: str, results_dir: str):
    """
    Try each recipe in turn, write the report, and put the starting (or with keep=best the best) recipe back.

    + profile: the rig's profile, no recipe applied
    + names: the recipes to try, the starting one first
    + start: the recipe the rig runs now
    + keep: ``start`` or ``best``
    + stamp: the experiment's UTC stamp
    + results_dir: the controller's results folder

    **Example:**

    .. code:: python

        try_recipes(name="Try recipes", profile=p, names=["wiki", "marlin"], start="wiki", keep="start",
                    stamp="20261125T101500Z", results_dir="results")
    """
    if not state.is_executing:
        host.noop("the recipes are tried when the deploy executes; planning measures nothing")
        return
    arguments = host.current_op_global_arguments or {}
    connector = {key: value for key, value in arguments.items() if key in CONNECTOR_ARGUMENT_KEYS}
    yield from nested_flow(_experiment, profile, names, start, keep, stamp, Path(results_dir), connector)


def stopped_by_ctrl_c(start: str, where: str) -> bool:
    """Whether Ctrl-C came (pyinfra ends the run once this operation returns): then the experiment says where it
    stopped and leaves its record for the next deploy."""
    if not ctrl_c_pressed():
        return False
    host.log(f"recipes: Ctrl-C: stopped {where}; {EXPERIMENT_RECORD} stays, and the next deploy on this rig puts "
             f"{start} back", logger.warning)
    return True


def _experiment(profile: Profile, names: list[str], start: str, keep: str, stamp: str, results_dir: Path,
                connector: dict[str, Any]) -> bool:
    # Run with the host in context (rigforge/operations/nested.py): the trials' operations execute at once.
    watch_ctrl_c()

    def trying(name: str) -> None:
        managed_file(name=f"Record the trial of {name}", dest=EXPERIMENT_RECORD,
                     content=experiment_record(profile, stamp, start, names, name))

    tournament = recipes_decide.Tournament(
        profile, lambda recipe, before: try_recipe(recipe, before, results_dir, connector),
        lambda name: stopped_by_ctrl_c(start, f"before a start of {name}"), trying)
    if not tournament.run(names, stamp):
        return False
    policy = RegressionPolicy.from_profile(profile.with_recipe(start))
    report = recipes_decide.judge_in_looks(tournament, start, policy, stamp)  # one or two looks (rounds.py)
    if stopped_by_ctrl_c(start, "after the last trial"):
        return False
    confirmed = recipes_decide.confirm_best(report, tournament, policy, stamp)  # a better verdict must replicate
    if confirmed is None:
        return False
    report = confirmed
    folder = recipes_decide.write_report(report, results_dir / host.name / f"recipes-{stamp}", host.name, stamp)
    for line in report_table(report) + [f"recipes: {line[2:]}" for line in starts_lines(report)]:
        host.log(line)
    for line in report.spent:
        host.log(f"recipes: {line}")
    final = report.best if keep == "best" and report.best else start
    settle(profile, final, start, stamp)
    kept = f"kept {final}, judged better than {start}" if final != start else f"back on {start}"
    host.log(f"recipes: {len(report.passed)} of {len(report.trials)} measured, "
             f"{len(report.trials) - len(report.passed)} disqualified; {len(tournament.seconds)} engine starts in "
             f"{sum(tournament.seconds) / 60:.1f} min; {kept}; report in {folder}")
    return bool(report.passed)


def settle(profile: Profile, final: str, start: str, stamp: str) -> None:
    """Serve ``final`` as the rig's recipe (removing the experiment record); record it when it is not the start."""
    chosen = profile.with_recipe(final)
    if final != start:
        base.record_profile(chosen, RecipeChoice(final, f"keep=best (recipe experiment {stamp})"))
    weights.apply_weights(chosen)
    images.apply_images(chosen)
    engine.apply_engine(chosen)
    service.apply_service(chosen, settled=True, held_out=True)  # the tournament returns the rig


def switch_steps(profile: Profile, previous: Profile | None) -> list[tuple[str, Any]]:
    """The roles a switch from ``previous`` (None: the first trial, everything) to ``profile`` must run:
    only those whose inputs differ — the checkpoint, the image, the native server; the unit always."""
    if previous is None:
        return [("its weights", weights.apply_weights), ("its image", images.apply_images),
                ("its engine", engine.apply_engine)]
    steps = []
    if profile.model != previous.model:
        steps.append(("its weights", weights.apply_weights))
    if profile.engine.native is None and image_ref(profile) != image_ref(previous):
        steps.append(("its image", images.apply_images))
    if profile.engine.native != previous.engine.native:
        steps.append(("its engine", engine.apply_engine))
    return steps


def try_recipe(profile: Profile, previous: Profile | None, results_dir: Path, connector: dict[str, Any]) -> Trial:
    """Switch the rig to one recipe, wait until healthy, bench it, and judge it (disqualified, or measured).

    + profile: the profile with the recipe laid over it
    + previous: the recipe tried before it (its weights, image and engine need no second look), None for the first
    + results_dir: the controller's results folder
    + connector: the operation's connector arguments
    """
    name = profile.engine.recipe or ""
    recipe = profile.engine.recipes[name]
    about = {"recipe": name, "description": recipe.description, "source": recipe.source,
             "claims": tuple(claim.model_dump(mode="json") for claim in recipe.claims)}
    window = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    for step, role in switch_steps(profile, previous):
        try:
            role(profile)
        except NestedOperationError:
            return Trial(**about, disqualified=f"could not get {step} onto the rig (see the error above)")
    if profile.engine.native is None:
        about.update(image=image_ref(profile), image_git_refs=rig_git_refs(host, profile))
    before = host.get_fact(Command, command=service.ENGINE_START_ID)
    try:
        service.apply_service(profile, settled=False)
        if host.get_fact(Command, command=service.ENGINE_START_ID) == before:  # nothing changed: the same start
            service.fresh_start(profile, f"a new start of {name}")
    except NestedOperationError:
        return Trial(**about, disqualified="did not come up: " + failure_reason(window, "no known failure in its "
                                                                                  "journal; see its last lines above"))
    started = host.get_fact(EngineStartupRecord, kind=profile.engine.kind)
    chose_otherwise = startup_verdict(profile.engine.kind, recipe.startup, started.record, started.invocation)
    if chose_otherwise:  # measured, it would be measured under a name it does not run
        return Trial(**about, disqualified="; ".join(chose_otherwise))
    measured = bench.measure(host, profile, results_dir, connector, stop_on_wrong_output=True)
    run_dir = str(measured.local.run_dir)
    if measured.result is None:
        return Trial(**about, run_dir=run_dir, disqualified=f"the bench client exited {measured.exit_status} "
                                                              "without a result")
    bench.write_reports(measured.result, bench.judge(measured.result, ()), measured.local)
    wrong = wrong_output(measured.result)
    known = failure_reason(window, "")
    reason = wrong or (f"logged a known failure: {known}" if known else "")
    return Trial(**about, result=measured.result, run_dir=run_dir, disqualified=reason)


def failure_reason(window: str, otherwise: str) -> str:
    """The first known failure of severity fail in the engine's journal since its last start (the recipe under
    trial: the one before may have logged its own until it stopped) or the kernel log since ``window``."""
    since_start = host.get_fact(KnownFailureLogs)
    logs = FailureLogs(kernel=host.get_fact(KnownFailureLogs, since=window).kernel, engine=since_start.engine,
                       bench=since_start.bench)
    hits = [hit for hit in find_known_failures(logs) if hit.signature.get("severity") == "fail"]
    if not hits:
        return otherwise
    return f"{hit_line(hits[0])} (journal: {hits[0].line})"
