"""What the weights role promises: the profile's model at model.path, recorded in its manifest, unchanged.

Cheap checks only (manifest, sizes, mtimes): re-hashing hundreds of GB is the deploy's
``--data verify_weights=true`` run, not a test.
"""

from __future__ import annotations

import pytest

from rigforge.facts.weights import WeightsOnDisk, parse_weights_state
from rigforge.profile import Profile
from roles.weights import HF_TOKEN_FILE, SECRETS_DIR


@pytest.fixture(scope="module")
def weights(host, profile: Profile):
    """The WeightsOnDisk fact's reading of the model folder, taken with the fact's own command."""
    return parse_weights_state(host.check_output(WeightsOnDisk().command(profile.model.path)))


def test_manifest_matches_the_profile_source(weights, profile: Profile) -> None:
    manifest = weights.manifest
    assert manifest is not None, f"{profile.model.path} has no readable manifest: the weights never completed"
    assert manifest.source == profile.model.source
    if profile.model.source == "huggingface":
        assert (manifest.origin, manifest.revision) == (profile.model.repo_id, profile.model.revision)
        assert manifest.allow_patterns == tuple(profile.model.allow_patterns)


def test_every_file_is_recorded_and_unchanged_since_it_was_hashed(weights, profile: Profile) -> None:
    for wanted in profile.model.files:
        assert weights.verified(wanted.name, wanted.sha256), f"{wanted.name} is missing, changed or unrecorded"
        assert weights.files[wanted.name].size == wanted.size
    assert weights.all_recorded_verified(), "a file recorded in the manifest changed on disk since"


def test_no_transfer_left_half_done(weights) -> None:
    leftovers = [name for name in weights.files if name.endswith((".part", ".chunk"))]
    assert not leftovers, f"unfinished transfers: {leftovers}"


def test_token_file_is_private_when_present(host) -> None:
    token = host.file(HF_TOKEN_FILE)
    if not token.exists:
        pytest.skip(f"no {HF_TOKEN_FILE} (no Hugging Face token given)")
    assert (token.user, token.mode) == ("root", 0o600)
    assert host.file(SECRETS_DIR).mode == 0o700
