"""The gateway role planned for the GPU inventories' profiles, without a host touched (roles/gateway.py).

Planned through pyinfra's own API on the ``@local`` host without connecting anywhere, the way a dry run plans a
fresh gateway host: every fact the role reads answers "nothing there yet". Three rigs of each GPU profile (two
serving its model, one another), the first also the gateway.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pyinfra.api import Config, FunctionCommand, Inventory, State
from pyinfra.api.host import Host
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_config, ctx_host, ctx_inventory, ctx_state

from rigforge.facts.dpkg_state import DpkgState
from rigforge.profile.loader import load_profile
from roles.gateway import apply_gateway

NOTHING_THERE: dict[str, Any] = {"DebPackages": {}, "SystemdStatus": {}, "SystemdEnabled": {},
                                 "DpkgUnfinished": DpkgState()}


def fleet(profile_name: str, tmp_path, key_of_b: bool = True) -> Inventory:
    keys = []
    for name in ("b", "c"):
        (tmp_path / name).write_text(f"secret-of-{name}\n")
        keys.append(str(tmp_path / name))
    serving = {"engine": {"host": "0.0.0.0"}}
    gateway = load_profile(profile_name, {**serving, "gateway": {"install": True, "users": ["alice", "bob"]}})
    other = load_profile(profile_name, {**serving, "engine": {"host": "0.0.0.0", "served_model_name": "other"}})
    return Inventory(([
        ("@local", {"rigforge_profile": gateway.model_dump(mode="json")}),
        ("rig-b", {"rigforge_profile": load_profile(profile_name, serving).model_dump(mode="json"),
                   "ssh_hostname": "192.0.2.11", **({"api_key_file": keys[0]} if key_of_b else {})}),
        ("rig-c", {"rigforge_profile": other.model_dump(mode="json"), "ssh_hostname": "192.0.2.12",
                   "api_key_file": keys[1]})], {}))


def plan(inventory: Inventory, monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[str, list[Any]]], str]:
    """The gateway role's operations on ``@local`` with their commands, and every line it logged."""
    state = State(inventory, Config())
    host: Host = inventory.get_host("@local")
    state.set_stage(StateStage.Prepare)
    logged: list[str] = []
    with ctx_state.use(state), ctx_inventory.use(inventory), ctx_config.use(state.config), ctx_host.use(host):
        monkeypatch.setattr(host, "get_fact", lambda fact, *a, **k: NOTHING_THERE.get(fact.__name__))
        monkeypatch.setattr(host, "log", lambda message, *a, **k: logged.append(message))
        apply_gateway()
        state.is_executing = True
        planned = [(state.get_op_meta(op_hash).names.pop(),
                    list(state.get_op_data_for_host(host, op_hash).command_generator()))
                   for op_hash in state.get_op_order()]
    return planned, "\n".join(logged)


@pytest.fixture(params=["2x-pix", "4x-threadripper", "8x-turin"])
def planned(request: pytest.FixtureRequest, tmp_path, monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[tuple[list[tuple[str, list[Any]]], str]]:
    monkeypatch.setenv("RIGFORGE_API_KEY", "secret-of-everyone")  # the gateway host's own engine key
    yield plan(fleet(request.param, tmp_path), monkeypatch)


def test_a_gpu_fleets_gateway_plans_every_step_and_prints_no_key(planned) -> None:
    plan, logged = planned
    names = [name.removeprefix("Gateway | ") for name, _ in plan]
    assert any(name.startswith("Install haproxy=") for name in names)
    assert "Write /etc/rigforge/gateway/haproxy.cfg" in names
    assert "Engine key of rig-b for the gateway" in names and "Engine key of rig-c for the gateway" in names
    assert "Gateway key of user alice" in names and "Gateway key of user bob" in names
    text = " ".join(str(command) for _, commands in plan for command in commands
                    if not isinstance(command, FunctionCommand))
    assert "secret-of-" not in text + logged
    assert "-> local (127.0.0.1:" in logged and "rig-b (192.0.2.11:" in logged
    assert "model other -> rig-c (192.0.2.12:" in logged



def test_a_rig_whose_key_this_machine_lacks_is_left_out_saying_why(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("RIGFORGE_API_KEY", raising=False)
    planned_ops, logged = plan(fleet("2x-pix", tmp_path, key_of_b=False), monkeypatch)
    assert "rig rig-b left out of the gateway: its engine asks for its key" in logged
    assert "rig local left out of the gateway" in logged or "rig @local left out" in logged
    names = [name for name, _ in planned_ops]
    assert not any("rig-b" in name for name in names)
