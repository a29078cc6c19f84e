"""Base role: what every later role needs — base packages and the applied profile on the rig."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import files

from rigforge.context import base_profile, current_profile, current_recipe_choice
from rigforge.operations import apt
from rigforge.operations.files import managed_file
from rigforge.profile import Profile
from rigforge.profile.loader import profile_hash
from rigforge.recipes.choice import PROFILE_RECORD, RecipeChoice
from rigforge.render import render

STATE_DIR = "/etc/rigforge"


@deploy("Base")
def apply_base() -> None:
    """Install the base packages and record the applied profile (JSON with its hash) in /etc/rigforge."""
    profile = current_profile()
    apt.packages(name="Install base packages", packages=profile.base_packages)
    files.directory(name=f"Create {STATE_DIR}", path=STATE_DIR, mode="755", user="root", group="root")
    record_profile(profile, current_recipe_choice())


def record_profile(profile: Profile, choice: RecipeChoice) -> None:
    """Write /etc/rigforge/profile.json: the profile as validated, the engine recipe the rig runs and why.

    + profile: the profile with the recipe laid over it (its hash is the record's)
    + choice: the recipe and why the rig runs it (rigforge/recipes/choice.py reads it back next run)
    """
    recipe = {"name": choice.name, "chosen_by": choice.chosen_by} if choice.name else None
    managed_file(
        name=f"Record the applied profile in {PROFILE_RECORD}",
        dest=PROFILE_RECORD,
        content=render(
            "rigforge/profile.json.j2",
            profile,
            profile_hash=profile_hash(profile),
            recipe=recipe,
            settings=base_profile().model_dump(mode="json"),
        ),
    )
