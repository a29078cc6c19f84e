"""Promise: an engine that answers beyond the rig's own processes is never served without a key, unless the
profile says why (rigforge/profile/access.py; docs/security.md)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rigforge.profile.access import EngineAuth, key_required, listens_beyond_loopback
from rigforge.profile.loader import ProfileError, load_profile
from rigforge.serving.api_key import needs_api_key

AUTO, KEY = EngineAuth(mode="auto"), EngineAuth(mode="key")
NONE = EngineAuth(mode="none", reason="behind the site's authenticating proxy")


@pytest.mark.parametrize("host", ["rig-01.lan", "localhost", "inference.example.com"])
def test_an_engine_bound_to_a_host_name_is_served_with_a_key(host: str) -> None:
    # A name may resolve to any address (localhost included: /etc/hosts decides), so it counts as beyond loopback.
    # The profile's engine.host takes addresses only today; this is the guard should it ever take a name.
    assert listens_beyond_loopback(host)
    assert key_required(AUTO, host)


@pytest.mark.parametrize(("host", "beyond"), [("127.0.0.1", False), ("127.3.2.1", False), ("::1", False),
                                              ("0.0.0.0", True), ("192.168.1.20", True), ("::", True)])
def test_auto_asks_for_a_key_exactly_beyond_loopback(host: str, beyond: bool) -> None:
    assert listens_beyond_loopback(host) is beyond
    assert key_required(AUTO, host) is beyond


def test_the_profile_asks_for_the_key_beyond_loopback() -> None:
    assert needs_api_key(load_profile("sandbox", {"engine": {"host": "192.168.1.20"}}))
    assert not needs_api_key(load_profile("sandbox", {"engine": {"host": "127.0.0.1"}}))


def test_key_always_and_none_never() -> None:
    assert key_required(KEY, "127.0.0.1") and key_required(KEY, "0.0.0.0")
    assert not key_required(NONE, "0.0.0.0") and not key_required(NONE, "rig-01.lan")


@pytest.mark.parametrize("reason", [None, "", "   "])
def test_no_key_needs_a_reason(reason: str | None) -> None:
    with pytest.raises(ValidationError, match="none serves the engine without an API key: set engine.auth.reason"):
        EngineAuth(mode="none", reason=reason)


@pytest.mark.parametrize("mode", ["auto", "key"])
def test_a_reason_is_refused_where_it_would_not_be_read(mode: str) -> None:
    with pytest.raises(ValidationError, match=f"engine.auth.reason is only read with mode none, not {mode}"):
        EngineAuth(mode=mode, reason="a reason")


def test_the_key_is_never_an_engine_flag() -> None:
    with pytest.raises(ProfileError) as refused:
        load_profile("sandbox", {"engine": {"flags": {"--api-key": "x"}}})
    assert ("--api-key must not be an engine flag (ps shows every process's command line): engine.auth hands the "
            "engine its key from the rig's secrets folder") in str(refused.value)
    assert "--api-keys" in load_profile("sandbox", {"engine": {"flags": {"--api-keys": "x"}}}).engine.flags
