"""Security trade-offs said before they are made (rigforge/checks/tradeoffs.py): one line each, in the
what-is-already-there table and in every run's log, naming the setting, what it gives up, its source and the
field that keeps the safe default; never blocking."""

from __future__ import annotations

import pytest

from rigforge.checks.takeover import takeover_lines, tradeoff_rows
from rigforge.checks.tradeoffs import tradeoff_lines, tradeoffs
from rigforge.profile.loader import load_profile


def test_the_sandbox_gives_up_nothing() -> None:
    assert tradeoffs(load_profile("sandbox")) == []


@pytest.mark.parametrize("name", ["2x-pix", "4x-threadripper", "8x-turin"])
def test_every_gpu_profile_says_its_three_trade_offs(name: str) -> None:
    lines = tradeoff_lines(load_profile(name))
    assert len(lines) == 3
    mitigations, listening, remote_code = lines
    assert mitigations.startswith("trade-off: boot.kernel_params mitigations=off")
    assert "source: rig-facts §1.4" in mitigations
    assert "to keep the safe default: remove mitigations=off" in mitigations
    assert "from boot.kernel_params" in mitigations
    assert listening.startswith("trade-off: engine.host 0.0.0.0: gives up a loopback-only engine")
    assert "requests need the rig's API key" in listening
    assert "to keep the safe default: engine.host: 127.0.0.1" in listening
    assert remote_code.startswith("trade-off: engine.flags --trust-remote-code: gives up running only the engine's")
    assert "to keep the safe default: remove --trust-remote-code from engine.flags" in remote_code
    assert all("\n" not in line for line in lines)


def test_the_8x_rig_names_every_mitigation_it_turns_off_and_both_sources() -> None:
    mitigations = tradeoff_lines(load_profile("8x-turin"))[0]
    for param in ("mitigations=off", "spectre_v2=off", "spec_store_bypass_disable=off", "l1tf=off", "mds=off",
                  "tsx_async_abort=off", "srbds=off", "mmio_stale_data=off", "retbleed=off"):
        assert param in mitigations
    assert "amd_iommu=off" not in mitigations and "source: rig-facts §1.4, §4.2" in mitigations


def test_an_engine_without_a_key_beyond_loopback_says_so_with_its_reason() -> None:
    profile = load_profile("sandbox", {"engine": {"host": "0.0.0.0",
                                                  "auth": {"mode": "none", "reason": "behind the lab's TLS proxy"}}})
    line, = tradeoff_lines(profile)
    assert "without a key (engine.auth none: behind the lab's TLS proxy)" in line


def test_the_table_shows_them_as_rows_that_never_block() -> None:
    rows = tradeoff_rows(load_profile("4x-threadripper"), None)  # type: ignore[arg-type]  # the facts are not read
    assert [row.component for row in rows] == ["trade-off"] * 3
    assert not any(row.blocking for row in rows)
    assert rows[1].found == "engine.host 0.0.0.0" and rows[1].action == "apply it, as the profile says"
    table = "\n".join(takeover_lines(rows))
    assert "trade-off" in table and "(blocking)" not in table
