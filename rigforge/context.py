"""What a role may read about the host being deployed: its validated profile and the run's switches.

``current_profile()`` is the profile with the engine recipe this run gives the rig laid over it
(rigforge/recipes/choice.py decides which); ``base_profile()`` is the profile as the inventory validated it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pyinfra import host

from rigforge.fleet import image_commits  # noqa: F401 - hands image_ref the rig's commits (its module end)
from rigforge.profile import Profile
from rigforge.profile.loader import ProfileError
from rigforge.recipes.choice import NO_RECIPE_STATE, RecipeChoice, choose_recipe

#: Switches a user may pass with ``--data key=value`` (or set as host data in an inventory).
RUN_SWITCHES: dict[str, tuple[type, Any, str]] = {
    "allow_reboot": (bool, True, "reboot the rig when a change needs it (false: stop and report)"),
    "skip_preflight": (bool, False, "continue even when a blocking preflight check fails"),
    "bench": (bool, True, "run the smoke benchmark at the end of deploys/full.py"),
    "probe": (bool, False, "run the GPU interconnect probe in deploys/preflight.py"),
    "verify_weights": (bool, False, "re-hash every weights file and fetch again the ones that changed"),
    "probe_python": (str, "", "the python3 (with torch) that runs the probe; default: the engine's"),
    "rollback": (bool, False, "deploys/driver_update.py: reinstall the driver recorded before the last update"),
    "on_regression": (str, "stop", "a driver update or engine build change (deploys/driver_update.py, images.py, "
                                   "serve.py, full.py) judged a regression: stop, or rollback"),
    "on_cannot_tell": (str, "stop", "a driver update or engine build change whose comparison cannot tell at the "
                                    "tolerance: stop (the rollout stops there), or continue (it goes on, the "
                                    "resolution printed and recorded)"),
    "break_lock": (bool, False, "take over the rig's deploy lock held by another run (check it is gone first)"),
    "replace_driver": (bool, False, "purge the NVIDIA driver the owner installed (the distribution's or the other "
                                    "flavor's packages; a .run install through its nvidia-uninstall) and install "
                                    "the profile's"),
    "recipe": (str, "", "deploys/full.py, deploys/serve.py: move the rig to this engine recipe (engine.recipes)"),
    "recipes": (str, "", "deploys/recipes.py: the recipes to try, comma-separated (default: all of the profile's)"),
    "keep": (str, "start", "deploys/recipes.py: end on the starting recipe (start), or on the one judged better "
                           "on the primary metric (best)"),
    "rebuild": (bool, False, "resolve the engine image's git refs afresh (git ls-remote) and build what they name "
                             "now, once for the run's rigs"),
    "drain_last": (bool, False, "a change that drains the rig at the fleet's gateway drains it even when it is the "
                                "last rig in rotation for its model (that model unanswered meanwhile)"),
}

#: Switches only some deploys take: a deploy that does not name them in ``run_settings(takes=...)`` refuses them.
DEPLOY_SWITCHES = {"recipe": "deploys/full.py and deploys/serve.py",
                   "recipes": "deploys/recipes.py", "keep": "deploys/recipes.py"}


_COMMAND = re.compile(r"^[A-Za-z0-9._/+-]+$")
_NAMES = re.compile(r"^[a-z0-9][a-z0-9._-]*(,[a-z0-9][a-z0-9._-]*)*$")
#: Switches that take one of a few words.
_CHOICES: dict[str, tuple[str, ...]] = {"on_regression": ("stop", "rollback"), "on_cannot_tell": ("stop", "continue"),
                                        "keep": ("start", "best")}


@dataclass(frozen=True)
class RunSettings:
    allow_reboot: bool
    skip_preflight: bool
    bench: bool
    probe: bool
    verify_weights: bool
    probe_python: str
    rollback: bool
    on_regression: str
    on_cannot_tell: str
    break_lock: bool
    replace_driver: bool
    recipe: str
    recipes: str
    keep: str
    rebuild: bool
    drain_last: bool

    @property
    def recipe_list(self) -> list[str]:
        """``recipes`` as names (empty: all of the profile's)."""
        return [name for name in self.recipes.split(",") if name]


def base_profile() -> Profile:
    """The profile the inventory validated for the current host, no recipe laid over it."""
    return _typed(_profile_json(), None)


def _profile_json() -> str:
    data = host.data.get("rigforge_profile")
    if not isinstance(data, dict):
        raise ProfileError(
            f"host {host.name} has no rigforge profile: use an inventory from inventory/ "
            "(it sets host data 'rigforge_profile' through rigforge.inventory)"
        )
    return json.dumps(data)  # the inventory's order: recipes are tried and listed in the profile's order


def current_recipe_choice() -> RecipeChoice:
    """The engine recipe this run gives the current host, and why (rigforge/recipes/choice.py)."""
    from rigforge.facts.recipes import RigRecipe

    profile = base_profile()
    if not profile.engine.recipes:
        return choose_recipe(profile, None, NO_RECIPE_STATE)
    return choose_recipe(profile, host.data.get("recipe") or None, host.get_fact(RigRecipe) or NO_RECIPE_STATE)


def current_profile() -> Profile:
    """The current host's profile with the engine recipe this run gives it laid over it."""
    return _typed(_profile_json(), current_recipe_choice().name)


@lru_cache(maxsize=64)
def _typed(data_json: str, recipe: str | None) -> Profile:
    profile = Profile.model_validate(json.loads(data_json))
    return profile.with_recipe(recipe) if recipe else profile


def run_settings(takes: tuple[str, ...] | None = None) -> RunSettings:
    """The run's switches, type-checked; a wrong value stops before any operation runs.

    + takes: given by a deploy file (its first call): the deploy-specific switches it accepts
      (``DEPLOY_SWITCHES``), the others refused; roles reading a switch later pass nothing
    """
    values = {}
    for key, (kind, default, meaning) in RUN_SWITCHES.items():
        value = host.data.get(key, default)
        if takes is not None and key in DEPLOY_SWITCHES and key not in takes and value != default:
            raise ProfileError(f"--data {key}={value}: only {DEPLOY_SWITCHES[key]} take it — {meaning}")
        if not isinstance(value, kind):
            expected = "true or false" if kind is bool else "a value"
            raise ProfileError(f"--data {key}={value!r}: expected {expected} — {meaning}")
        if key in _CHOICES and value not in _CHOICES[key]:
            raise ProfileError(f"--data {key}={value!r}: expected one of {', '.join(_CHOICES[key])} — {meaning}")
        if key in ("recipe", "recipes") and value and not _NAMES.match(value):
            raise ProfileError(f"--data {key}={value!r}: expected recipe names (a-z, 0-9, ._-), comma-separated "
                               f"for recipes — {meaning}")
        if kind is str and value and not _COMMAND.match(value) and key != "recipes":
            raise ProfileError(
                f"--data {key}={value!r}: expected a command or path (letters, digits, ._/+-) — {meaning}"
            )
        values[key] = value
    return RunSettings(**values)
