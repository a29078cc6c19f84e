"""What the rig records about its engine recipe: the profile record's ``recipe`` and an experiment cut short.

``RigRecipe`` reads both files in one command; ``parse_recipe_state`` is its pure parser.
"""

from __future__ import annotations

import json
from typing import Any

from pyinfra.api import FactBase

from rigforge.reads.parsing import split_sections
from rigforge.recipes.choice import EXPERIMENT_RECORD, NO_RECIPE_STATE, PROFILE_RECORD, Experiment, RecipeState


def _json(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parse_recipe_state(output: str) -> RecipeState:
    """The two records from ``RecipeState``'s output (a missing or unreadable file reads as absent).

    >>> parse_recipe_state('## profile\\n{"recipe": {"name": "a", "chosen_by": "x"}}\\n## experiment\\n').recorded
    'a'
    """
    sections = split_sections(output)
    profile = _json(sections.get("profile", "")) or {}
    recipe = profile.get("recipe") if isinstance(profile.get("recipe"), dict) else {}
    record = _json(sections.get("experiment", ""))
    experiment = None
    if record is not None:
        experiment = Experiment(str(record.get("stamp") or "?"), record.get("starting"), record.get("trying"))
    if not recipe and experiment is None:
        return NO_RECIPE_STATE
    return RecipeState(recipe.get("name"), recipe.get("chosen_by"), experiment)


class RigRecipe(FactBase[RecipeState]):
    """The recipe the rig's profile record names and why, and a recipe experiment's record if one was cut."""

    def command(self) -> str:
        return (f"echo '## profile'; cat {PROFILE_RECORD} 2>/dev/null; echo; "
                f"echo '## experiment'; cat {EXPERIMENT_RECORD} 2>/dev/null; true")

    def process(self, output: list[str]) -> RecipeState:
        return parse_recipe_state("\n".join(output))
