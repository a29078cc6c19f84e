"""Verify a rig against its profile with testinfra.

    pytest --hosts=paramiko://rig2x-a tests/verify                       # a real rig (ssh config / agent)
    pytest --hosts=paramiko://sandbox-1 --ssh-config=.sandbox/ssh_config tests/verify
    pytest --hosts=local:// --profile 2x-pix tests/verify/test_gpus.py     # a machine never provisioned

The profile is the one the rig records in /etc/rigforge/profile.json, with the engine recipe the record names
laid over it; ``--profile NAME`` names it explicitly instead (loaded from this checkout's inventory/profiles, with
the recorded recipe when the profile has it).

Host keys are trusted as the deploys trust them (rigforge/connection/verify_trust.py): before any test, each paramiko
host's key must be the one its known_hosts lists, or the suite stops with the deploys' one line and runs nothing
there.
"""

from __future__ import annotations

import functools
import json

import pytest
from testinfra.backend import get_backends
from testinfra.backend.paramiko import ParamikoBackend

from rigforge.connection.verify_trust import checked_client, host_key_refusal
from rigforge.facts.images import ImageRecord, parse_image_record
from rigforge.images.plans import build_plan
from rigforge.profile import Profile
from rigforge.profile.loader import load_profile

RECORD = "/etc/rigforge/profile.json"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--profile", default=None, help="profile the rig must match (default: the one it records)")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stop before any test when a host's key is unknown or changed: one line, nothing run on that host."""
    option = session.config.option
    if not getattr(option, "hosts", None):
        return
    for backend in get_backends(option.hosts.split(","), connection=option.connection,
                                ssh_config=option.ssh_config, ssh_identity_file=option.ssh_identity_file):
        refusal = host_key_refusal(backend) if isinstance(backend, ParamikoBackend) else None
        if refusal:
            raise pytest.UsageError(refusal)


# The connection testinfra opens is checked again before its first command (a key that changed since).
ParamikoBackend.client = functools.cached_property(checked_client(ParamikoBackend.client.func))
ParamikoBackend.client.__set_name__(ParamikoBackend, "client")


@pytest.fixture(scope="module")
def applied(host) -> dict:
    """The profile record the base role wrote on the rig."""
    record = host.file(RECORD)
    if not record.exists:
        pytest.fail(f"{RECORD} is missing: this host was never provisioned by rigforge")
    return json.loads(record.content_string)


@pytest.fixture(scope="module")
def profile(request: pytest.FixtureRequest, host) -> Profile:
    """The profile to verify against, as this checkout defines it (with the rig's recorded overrides).

    With ``--profile NAME`` a host rigforge never provisioned (no record) is verified against that profile.
    """
    name = request.config.getoption("--profile")
    if name and not host.file(RECORD).exists:
        return load_profile(name)
    applied = request.getfixturevalue("applied")
    recipe = (applied.get("recipe") or {}).get("name")
    name = name or applied["profile"]
    profile = Profile.model_validate(applied["settings"]) if name == applied["profile"] else load_profile(name)
    return profile.with_recipe(recipe) if recipe in profile.engine.recipes else profile


@pytest.fixture(scope="module")
def gpus_present(host) -> bool:
    return host.exists("nvidia-smi") and host.run("nvidia-smi -L").rc == 0


@pytest.fixture()
def needs_gpu(gpus_present: bool, profile: Profile) -> None:
    """Skip GPU-only checks on hosts without NVIDIA GPUs (the sandbox), saying why."""
    if profile.gpus is None:
        pytest.skip(f"profile {profile.name} has no GPUs")
    if not gpus_present:
        pytest.skip("no NVIDIA GPU on this host (nvidia-smi absent or failing)")


@pytest.fixture(scope="module")
def image_record(host, profile: Profile) -> ImageRecord | None:
    """The rig's record of what the image build's git refs resolved to (None: no build, or no record)."""
    plan = build_plan(profile)
    if plan is None:
        return None
    record = host.file(plan.record_path)
    return parse_image_record(record.content_string) if record.exists else None
