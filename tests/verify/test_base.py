"""What the base role promises: base packages, /etc/rigforge with the applied profile and its hash."""

from __future__ import annotations

import json

import pytest

from rigforge.profile import Profile
from rigforge.profile_loader import load_profile, profile_hash
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
    assert applied["profile_hash"] == profile_hash(Profile.model_validate(applied["settings"]))


def test_rig_runs_this_checkouts_profile(applied: dict) -> None:
    """The rig's settings equal what the checkout's profile files say now (no drift since the last deploy)."""
    try:
        current = load_profile(applied["profile"])
    except Exception as exc:  # the checkout may lack the rig's overrides: say so rather than fail obscurely
        pytest.skip(f"cannot load profile {applied['profile']!r} here: {exc}")
    if current.model_dump(mode="json") != applied["settings"]:
        changed = sorted(k for k, v in current.model_dump(mode="json").items() if applied["settings"].get(k) != v)
        pytest.fail(f"rig was provisioned with different settings in: {', '.join(changed)} — run deploys/full.py")
    assert json.dumps(applied["settings"], sort_keys=True)
