"""Promise: a rig runs the recipe it was told to, else the one it records, else the profile's default, and the
table of what is there says which and why; a cut experiment puts the starting recipe back
(rigforge/recipes/choice.py). The sandbox profile's recipes; the rig's records as the RecipeState fact reads them.
"""

from __future__ import annotations

import pytest

from rigforge.profile.loader import ProfileError, load_profile
from rigforge.recipes.choice import (
    DEFAULT,
    Experiment,
    RecipeChoice,
    RecipeState,
    choose_recipe,
    interrupted_line,
    recipe_cells,
)

SANDBOX = load_profile("sandbox")
NO_RECIPES = SANDBOX.model_copy(update={"engine": SANDBOX.engine.model_copy(update={"recipes": {}})})


def test_every_choice_carries_what_the_rig_recorded_and_the_profiles_default() -> None:
    recorded = RecipeState("one-slot", "--data recipe=one-slot")
    assert choose_recipe(SANDBOX, "one-thread", recorded) == RecipeChoice(
        "one-thread", "--data recipe=one-thread", "one-slot", "default")
    assert choose_recipe(SANDBOX, None, recorded) == RecipeChoice("one-slot", "--data recipe=one-slot", "one-slot",
                                                                  "default")
    assert choose_recipe(SANDBOX, None, RecipeState("one-slot")) == RecipeChoice("one-slot", "the rig's record",
                                                                                 "one-slot", "default")
    assert choose_recipe(SANDBOX, None, RecipeState("gone", "x")) == RecipeChoice("default", DEFAULT, "gone",
                                                                                  "default")


def test_a_profile_without_recipes_runs_as_it_is_and_refuses_a_switch() -> None:
    assert choose_recipe(NO_RECIPES, None, RecipeState()) == RecipeChoice(None, "the profile (no engine.recipes)")
    with pytest.raises(ProfileError) as refused:
        choose_recipe(NO_RECIPES, "fast", RecipeState())
    assert str(refused.value) == "--data recipe=fast: profile sandbox defines no engine.recipes"


def test_a_cut_experiment_is_said_with_what_was_on_trial() -> None:
    choice = RecipeChoice("default", DEFAULT)
    assert interrupted_line(Experiment("20261125T101500Z", "default", "one-slot"), choice) == (
        "the recipe experiment of 20261125T101500Z was cut short while trying 'one-slot': the rig gets its starting "
        "recipe 'default' back")
    assert interrupted_line(Experiment("20261125T101500Z", "default", None), choice) == (
        "the recipe experiment of 20261125T101500Z was cut short: the rig gets its starting recipe 'default' back")


@pytest.mark.parametrize(("state", "switch", "cells"), [
    (RecipeState(), None, ("none recorded", "run default", DEFAULT)),
    (RecipeState("default", DEFAULT, Experiment("20261125T101500Z", "default", "one-slot")), None,
     ("default (the profile's default (engine.recipe)); the experiment of 20261125T101500Z was cut short while "
      "trying one-slot", "put default back", "a cut experiment leaves the rig on its starting recipe")),
    (RecipeState(None, None, Experiment("20261125T101500Z", "default", None)), None,
     ("none recorded; the experiment of 20261125T101500Z was cut short", "put default back",
      "a cut experiment leaves the rig on its starting recipe")),
    (RecipeState("default", DEFAULT), "one-slot", ("default (the profile's default (engine.recipe))",
                                                   "switch to one-slot", "--data recipe=one-slot")),
    (RecipeState("default", DEFAULT), None, ("default (the profile's default (engine.recipe))", "keep default",
                                             "the rig's record")),
])
def test_the_table_says_what_the_rig_has_what_it_gets_and_why(
        state: RecipeState, switch: str | None, cells: tuple[str, str, str]) -> None:
    assert recipe_cells(choose_recipe(SANDBOX, switch, state), state) == cells


def test_a_recipe_kept_without_a_default_says_only_the_record() -> None:
    state = RecipeState("one-slot", "--data recipe=one-slot")
    assert recipe_cells(RecipeChoice("one-slot", "x", "one-slot", None), state)[2] == "the rig's record"
