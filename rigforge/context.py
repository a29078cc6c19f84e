"""What a role may read about the host being deployed: its validated profile and the run's switches."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pyinfra import host

from rigforge.profile import Profile
from rigforge.profile.loader import ProfileError

#: Switches a user may pass with ``--data key=value`` (or set as host data in an inventory).
RUN_SWITCHES: dict[str, tuple[type, Any, str]] = {
    "allow_reboot": (bool, True, "reboot the rig when a change needs it (false: stop and report)"),
    "skip_preflight": (bool, False, "continue even when a blocking preflight check fails"),
    "bench": (bool, True, "run the smoke benchmark at the end of deploys/full.py"),
    "probe": (bool, False, "run the GPU interconnect probe in deploys/preflight.py"),
    "verify_weights": (bool, False, "re-hash every weights file and fetch again the ones that changed"),
    "probe_python": (str, "", "the python3 (with torch) that runs the probe; default: the engine's"),
    "rollback": (bool, False, "deploys/driver_update.py: reinstall the driver recorded before the last update"),
    "on_regression": (str, "stop", "deploys/driver_update.py after a slower bench: stop, or rollback"),
    "break_lock": (bool, False, "take over the rig's deploy lock held by another run (check it is gone first)"),
    "replace_driver": (bool, False, "purge the NVIDIA driver the owner installed (the distribution's or the other "
                                    "flavor's packages; a .run install through its nvidia-uninstall) and install "
                                    "the profile's"),
}


_COMMAND = re.compile(r"^[A-Za-z0-9._/+-]+$")
#: Switches that take one of a few words.
_CHOICES: dict[str, tuple[str, ...]] = {"on_regression": ("stop", "rollback")}


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
    break_lock: bool
    replace_driver: bool


def current_profile() -> Profile:
    """The profile the inventory validated for the current host."""
    data = host.data.get("rigforge_profile")
    if not isinstance(data, dict):
        raise ProfileError(
            f"host {host.name} has no rigforge profile: use an inventory from inventory/ "
            "(it sets host data 'rigforge_profile' through rigforge.inventory)"
        )
    return _typed(json.dumps(data, sort_keys=True))


@lru_cache(maxsize=32)
def _typed(data_json: str) -> Profile:
    return Profile.model_validate(json.loads(data_json))


def run_settings() -> RunSettings:
    """The run's switches, type-checked; a wrong value stops before any operation runs."""
    values = {}
    for key, (kind, default, meaning) in RUN_SWITCHES.items():
        value = host.data.get(key, default)
        if not isinstance(value, kind):
            expected = "true or false" if kind is bool else "a value"
            raise ProfileError(f"--data {key}={value!r}: expected {expected} — {meaning}")
        if key in _CHOICES and value not in _CHOICES[key]:
            raise ProfileError(f"--data {key}={value!r}: expected one of {', '.join(_CHOICES[key])} — {meaning}")
        if kind is str and value and not _COMMAND.match(value):
            raise ProfileError(
                f"--data {key}={value!r}: expected a command or path (letters, digits, ._/+-) — {meaning}"
            )
        values[key] = value
    return RunSettings(**values)
