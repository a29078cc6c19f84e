"""What the recipe a rig runs promises: the profile record names one of the profile's recipes and why, the engine's
unit says it runs that recipe (tests/verify/test_service.py checks the unit is the one it renders), and no recipe
experiment was left cut short (the next deploy would put the starting recipe back); and the engine runs what the
recipe says: its own start-up report (kept by the health wait) is what the recipe's ``startup`` promises."""

from __future__ import annotations

import pytest

from rigforge.facts.startup import EngineStartupRecord, parse_startup_record
from rigforge.profile import Profile
from rigforge.recipes.choice import EXPERIMENT_RECORD
from rigforge.recipes.startup import startup_verdict
from roles.service import UNIT_PATH


def test_the_rig_runs_a_recipe_of_its_profile(host, applied: dict, profile: Profile) -> None:
    if not profile.engine.recipes:
        pytest.skip(f"profile {profile.name} defines no engine.recipes")
    recorded = applied.get("recipe") or {}
    assert recorded.get("name") in profile.engine.recipes, f"the profile record names {recorded}"
    assert recorded.get("chosen_by"), "the profile record does not say why the rig runs its recipe"
    recipe = profile.engine.recipes[recorded["name"]]
    header = f"# Recipe {recorded['name']}: {recipe.description}"
    assert header in host.file(UNIT_PATH).content_string, f"{UNIT_PATH} does not say it runs {recorded['name']}"


def test_no_recipe_experiment_was_left_cut_short(host) -> None:
    assert not host.file(EXPERIMENT_RECORD).exists, (
        f"{EXPERIMENT_RECORD} is there: a recipe experiment was cut short; run any deploy (deploys/serve.py) and it "
        "puts the starting recipe back")


def test_the_engine_reports_what_its_recipe_promises(host, profile: Profile) -> None:
    recipe = profile.engine.recipes.get(profile.engine.recipe or "")
    if recipe is None or not recipe.startup:
        pytest.skip(f"the recipe {profile.engine.recipe} promises nothing its engine reports at start")
    started = parse_startup_record(host.run(EngineStartupRecord().command(profile.engine.kind)).stdout)
    problems = startup_verdict(profile.engine.kind, recipe.startup, started.record, started.invocation)
    assert not problems, f"recipe {profile.engine.recipe}: " + "; ".join(problems)
