"""Which recipe a rig runs, and what the rig itself says about it.

A rig runs the recipe given with ``--data recipe=NAME`` (on deploys/full.py and deploys/serve.py: a switch),
else the one its profile record names (``/etc/rigforge/profile.json``: a switch, or the best recipe an
experiment kept, stays), else the profile's default (``engine.recipe``). A recipe experiment
(deploys/recipes.py) never changes that record: it writes ``/var/lib/rigforge/recipe-experiment.json`` while it
runs and removes it at the end, so a run cut in its middle is found by the next deploy, which puts the
starting recipe back and says so.

Pure functions: the ``RecipeState`` fact (rigforge/facts/recipes.py) reads the two files.

Example::

    choice = choose_recipe(profile, switch=None, state=host.get_fact(RigRecipe))
    profile = profile.with_recipe(choice.name)
"""

from __future__ import annotations

from dataclasses import dataclass

from rigforge.profile import Profile
from rigforge.profile.loader import ProfileError

PROFILE_RECORD = "/etc/rigforge/profile.json"
EXPERIMENT_RECORD = "/var/lib/rigforge/recipe-experiment.json"
SWITCH = "--data recipe"
DEFAULT = "the profile's default (engine.recipe)"


@dataclass(frozen=True)
class Experiment:
    """An experiment's record on the rig: when it started, the recipe it started from, the one under trial."""

    stamp: str
    starting: str | None
    trying: str | None


@dataclass(frozen=True)
class RecipeState:
    """What the rig records: the recipe it runs and why (None: no record), and an experiment cut short."""

    recorded: str | None = None
    chosen_by: str | None = None
    experiment: Experiment | None = None


NO_RECIPE_STATE = RecipeState()


@dataclass(frozen=True)
class RecipeChoice:
    """The recipe this run gives the rig and why; ``name`` None for a profile without recipes."""

    name: str | None
    chosen_by: str
    recorded: str | None = None
    default: str | None = None  # the profile's engine.recipe

    @property
    def switches(self) -> bool:
        """The rig records another recipe than the one it gets now."""
        return self.recorded is not None and self.recorded != self.name


def choose_recipe(profile: Profile, switch: str | None, state: RecipeState) -> RecipeChoice:
    """The recipe the rig runs after this run (pure).

    + profile: the rig's profile, recipes not applied
    + switch: ``--data recipe=NAME`` (None: not given)
    + state: what the rig records

    A switch to a recipe the profile lacks is refused; a recorded recipe the profile no longer has gives way
    to the default.
    """
    recipes = profile.engine.recipes
    if not recipes:
        if switch:
            raise ProfileError(f"{SWITCH}={switch}: profile {profile.name} defines no engine.recipes")
        return RecipeChoice(None, "the profile (no engine.recipes)")
    if switch:
        if switch not in recipes:
            raise ProfileError(f"{SWITCH}={switch}: no such recipe in profile {profile.name}; "
                               f"engine.recipes: {', '.join(profile.recipe_names)}")
        return RecipeChoice(switch, f"{SWITCH}={switch}", state.recorded, profile.engine.recipe)
    if state.recorded in recipes:
        return RecipeChoice(state.recorded, state.chosen_by or "the rig's record", state.recorded,
                            profile.engine.recipe)
    return RecipeChoice(profile.engine.recipe, DEFAULT, state.recorded, profile.engine.recipe)


def interrupted_line(experiment: Experiment, choice: RecipeChoice) -> str:
    """What a deploy says when it finds an experiment that was cut short.

    >>> interrupted_line(Experiment("20261125T101500Z", "default", "one-slot"), RecipeChoice("default", DEFAULT))
    "the recipe experiment of 20261125T101500Z was cut short while trying 'one-slot': the rig gets its starting \
recipe 'default' back"
    """
    trying = f" while trying {experiment.trying!r}" if experiment.trying else ""
    return (f"the recipe experiment of {experiment.stamp} was cut short{trying}: the rig gets its starting recipe "
            f"{choice.name!r} back")


def recipe_cells(choice: RecipeChoice, state: RecipeState) -> tuple[str, str, str]:
    """What the table of what is already there says of the recipe: found, rigforge will, why (pure)."""
    found = f"{state.recorded} ({state.chosen_by})" if state.recorded else "none recorded"
    if state.experiment is not None:
        trying = f" while trying {state.experiment.trying}" if state.experiment.trying else ""
        found += f"; the experiment of {state.experiment.stamp} was cut short{trying}"
        return found, f"put {choice.name} back", "a cut experiment leaves the rig on its starting recipe"
    if state.recorded is None:
        return found, f"run {choice.name}", choice.chosen_by
    if choice.switches:
        return found, f"switch to {choice.name}", choice.chosen_by
    why = "the rig's record"
    if choice.default and choice.name != choice.default:
        why += f"; the profile's default is {choice.default} (--data recipe={choice.default} moves it there)"
    return found, f"keep {choice.name}", why
