"""Running on the rig itself: the @local inventory, the doctor's host names, and a dry run that plans past what
the host lacks (a missing tool, no systemd) where a real run stops before any change.

The dry-run cases run pyinfra itself in-process with its @fake connector answering the fact commands with the
lent H200 machine's outputs (tests/fixtures/real-gpu/nvidia-h200-x2: PID 1 ``process_api``, no systemd, no
update-initramfs): a stand-in for that machine, since none can exist here.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
from pyinfra.api import Config, Inventory, State, deploy
from pyinfra.api.connect import connect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.state import StateStage

from rigforge.doctor import host_name
from rigforge.facts.init_system import InitSystem
from rigforge.inventory import LOCAL_HOST, LOCAL_PROFILE_ENV, local_host
from rigforge.operations.missing_tool import dry_run, service_unit

MACHINE = Path(__file__).resolve().parents[1] / "fixtures" / "real-gpu" / "nvidia-h200-x2"
REPO = Path(__file__).resolve().parents[2]


def test_local_host_takes_the_profile_from_the_environment() -> None:
    name, data = local_host(environ={LOCAL_PROFILE_ENV: "2x-pix"}, allow_reboot=False)
    assert name == LOCAL_HOST == "@local"
    assert data["rigforge_profile"]["name"] == "2x-pix" and data["allow_reboot"] is False
    assert local_host("sandbox", environ={})[1]["rigforge_profile"]["name"] == "sandbox"


def test_local_host_without_a_profile_says_how_to_name_one() -> None:
    with pytest.raises(SystemExit) as stop:
        local_host(environ={})
    assert str(stop.value) == ("rigforge: inventory/local.py: no profile: set RIGFORGE_PROFILE to one of 2x-pix, "
                               "4x-threadripper, 8x-turin, sandbox, sandbox-instruct (e.g. RIGFORGE_PROFILE=2x-pix "
                               "pyinfra inventory/local.py deploys/preflight.py)")
    with pytest.raises(SystemExit, match="unknown setting 'ssh_hostname'"):
        local_host("2x-pix", environ={}, ssh_hostname="10.0.0.5")


def test_the_inventory_file_is_one_local_host(monkeypatch: pytest.MonkeyPatch) -> None:
    import runpy

    monkeypatch.setenv(LOCAL_PROFILE_ENV, "8x-turin")
    hosts = runpy.run_path(str(REPO / "inventory" / "local.py"))["local"]
    assert [(name, data["rigforge_profile"]["name"]) for name, data in hosts] == [("@local", "8x-turin")]


def test_the_doctor_names_a_local_host_as_pyinfra_does() -> None:
    assert host_name("@local") == "@local"
    assert (host_name("@rigforge/rig2x-a"), host_name("sandbox-1")) == ("rig2x-a", "sandbox-1")


def test_init_system_of_the_machine() -> None:
    pid1 = (MACHINE / "virt.txt").read_text()
    assert "pid1=process_api" in pid1
    assert InitSystem().process(["process_api"]) == "process_api"


@deploy("A unit on a host without systemd")
def _enable_a_unit() -> None:
    service_unit(name="Enable nvidia-persistenced", service="nvidia-persistenced.service", enabled=True)


def _prepare(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> State:
    monkeypatch.setattr(sys, "argv", argv)
    responses = {InitSystem().command(): "process_api\n"}
    state = State(Inventory(([("@fake/h200", {"fake_responses": responses, "fake_delay": 0,
                                              "fake_delay_jitter": 0})], {})), Config())
    connect_all(state)
    state.set_stage(StateStage.Prepare)
    add_deploy(state, _enable_a_unit)
    return state


def test_a_dry_run_notes_no_systemd_and_plans_on(monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pyinfra")
    state = _prepare(["pyinfra", "inventory/local.py", "deploys/full.py", "--dry"], monkeypatch)
    assert [host.name for host in state.failed_hosts] == ["@fake/h200"]  # the dry run exits non-zero
    assert ("systemd is not running (PID 1 is process_api): nvidia-persistenced.service cannot be enabled or "
            "started, and rigforge's units need systemd; a run stops here before any change (the dry run plans "
            "on)") in caplog.text


def test_a_real_run_hands_the_unit_to_pyinfra(monkeypatch: pytest.MonkeyPatch,
                                              caplog: pytest.LogCaptureFixture) -> None:
    # Without --dry it is pyinfra's own systemd.service (whose systemctl fact fails a host with no systemd).
    assert not dry_run(["pyinfra", "-y", "inventory/local.py", "deploys/full.py"])
    state = _prepare(["pyinfra", "-y", "inventory/local.py", "deploys/full.py"], monkeypatch)
    names = [state.get_op_meta(op_hash).names for op_hash in state.get_op_order()]
    assert names == [{"A unit on a host without systemd | Enable nvidia-persistenced"}]
    assert "systemd is not running" not in caplog.text and not state.failed_hosts
