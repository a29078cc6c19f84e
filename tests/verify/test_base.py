"""What the base role promises: base packages, /etc/rigforge with the applied profile and its hash."""

from __future__ import annotations

from rigforge.profile import Profile
from rigforge.profile.loader import profile_hash
from rigforge.render import header_text


def test_base_packages_installed(host, profile: Profile) -> None:
    missing = [name for name in profile.base_packages if not host.package(name).is_installed]
    assert not missing, f"base packages missing: {missing}"


def test_state_dir(host) -> None:
    state_dir = host.file("/etc/rigforge")
    assert state_dir.is_directory
    assert (state_dir.user, state_dir.group, state_dir.mode) == ("root", "root", 0o755)


def test_profile_record_is_managed_and_hashed(host, applied: dict, profile: Profile) -> None:
    record = host.file("/etc/rigforge/profile.json")
    assert record.mode == 0o644
    assert applied["_managed_by"] == header_text(profile)
    recorded = Profile.model_validate(applied["settings"])
    recipe = (applied.get("recipe") or {}).get("name")
    # The hash is of what the rig runs: the profile with its recipe laid over it.
    assert applied["profile_hash"] == profile_hash(recorded.with_recipe(recipe) if recipe else recorded)
