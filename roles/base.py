"""Base role: what every later role needs — base packages and the applied profile on the rig."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import files

from rigforge.context import current_profile
from rigforge.operations import apt
from rigforge.operations.files import managed_file
from rigforge.profile.loader import profile_hash
from rigforge.render import render

STATE_DIR = "/etc/rigforge"


@deploy("Base")
def apply_base() -> None:
    """Install the base packages and record the applied profile (JSON with its hash) in /etc/rigforge."""
    profile = current_profile()
    apt.packages(name="Install base packages", packages=profile.base_packages)
    files.directory(name=f"Create {STATE_DIR}", path=STATE_DIR, mode="755", user="root", group="root")
    managed_file(
        name=f"Record the applied profile in {STATE_DIR}/profile.json",
        dest=f"{STATE_DIR}/profile.json",
        content=render(
            "rigforge/profile.json.j2",
            profile,
            profile_hash=profile_hash(profile),
            settings=profile.model_dump(mode="json"),
        ),
    )
