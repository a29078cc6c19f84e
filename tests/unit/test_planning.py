"""rigforge/planning.py gives pyinfra's own answers, computed without reading source."""

from __future__ import annotations

import importlib
from pathlib import Path

import pyinfra
import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.util import get_operation_order_from_stack

from rigforge import planning

pyinfra_arguments = importlib.import_module("pyinfra.api.arguments")
pyinfra_operation = importlib.import_module("pyinfra.api.operation")

# A deploy file as pyinfra's CLI runs it: compiled under its own path, its calls spread over several lines
# (the line of a multi-line call is where pyinfra and the frames could disagree, if anywhere).
DEPLOY_SOURCE = '''
def role(compare):
    return compare(
        "role",
    )


def layer(compare):
    x = 1
    return role(
        compare,
    ) if x else None


result = layer(
    COMPARE,
)
'''


def both_orders(state: State) -> tuple[list[int], list[int]]:
    """pyinfra's order and rigforge's, asked from the same frame as pyinfra's operation decorator asks."""
    return get_operation_order_from_stack(state), planning.operation_order_from_stack(state)


def run_deploy_file(tmp_path: Path, state: State) -> tuple[list[int], list[int]]:
    deploy = tmp_path / "deploys" / "full.py"
    deploy.parent.mkdir()
    deploy.write_text(DEPLOY_SOURCE)
    state.current_deploy_filename = str(deploy)
    namespace = {"COMPARE": lambda _name: both_orders(state)}
    exec(compile(DEPLOY_SOURCE, str(deploy), "exec"), namespace)  # noqa: S102 - how pyinfra runs deploy files
    return namespace["result"]


@pytest.fixture
def state() -> State:
    return State(Inventory((["@local"], {})), Config())


@pytest.mark.parametrize("is_cli", [True, False])
def test_the_order_of_an_operation_in_a_deploy_file_is_pyinfras(tmp_path: Path, state: State,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 is_cli: bool) -> None:
    monkeypatch.setattr(pyinfra, "is_cli", is_cli)
    state.current_op_file_number = 3
    ours, theirs = run_deploy_file(tmp_path, state)
    assert ours == theirs
    assert len(ours) > 3  # the deploy file's frames were found and counted


def test_without_the_deploy_file_on_the_stack_the_order_is_pyinfras(state: State) -> None:
    state.current_deploy_filename = "/nowhere/deploy.py"
    ours, theirs = both_orders(state)
    assert ours == theirs


def test_without_a_deploy_file_every_frame_counts_as_in_pyinfra(state: State) -> None:
    state.current_deploy_filename = None
    ours, theirs = both_orders(state)
    assert ours == theirs


def test_global_arguments_are_pyinfras_and_a_fresh_list_each_time() -> None:
    assert planning.all_global_arguments() == planning._PYINFRA_ALL_GLOBAL_ARGUMENTS()
    planning.all_global_arguments().clear()
    assert planning.all_global_arguments() == planning._PYINFRA_ALL_GLOBAL_ARGUMENTS()


def test_install_puts_each_where_pyinfra_looks_them_up() -> None:
    planning.install()
    planning.install()
    assert pyinfra_operation.get_operation_order_from_stack is planning.operation_order_from_stack
    assert pyinfra_arguments.all_global_arguments is planning.all_global_arguments
    for module in ("operation", "facts", "deploy"):
        assert importlib.import_module(f"pyinfra.api.{module}").pop_global_arguments is planning.pop_global_arguments
    assert pyinfra_arguments.pop_global_arguments is planning._PYINFRA_POP_GLOBAL_ARGUMENTS  # never wraps itself


# Every layer of a host's data holds global arguments, and some hold the same one: in pyinfra's HostData the
# first layer wins (override, host, its groups merged with the last group winning, inventory, deploy data),
# and so it must here.
INVENTORY_LAYERS = (
    [("rig-a", {"_sudo": True, "_env": {"FROM": "host"}, "_timeout": 30})],
    {"_retries": 2},  # the inventory's override data
)
GROUPS = {
    "fleet": ([("rig-a", {})], {"_sudo_user": "fleet", "_retries": 9, "_shell_executable": "bash"}),
    "lab": ([("rig-a", {})], {"_sudo_user": "lab", "_chdir": "/srv"}),
    "all": ([], {"_get_pty": True, "_timeout": 99, "_use_sudo_login": True}),
}


def _layered_host() -> tuple[State, object]:
    inventory = Inventory(INVENTORY_LAYERS, **GROUPS)
    state = State(inventory, Config())
    host = inventory.get_host("rig-a")
    host.data.on_this_run = "set during the deploy"  # the override layer HostData injects
    return state, host


@pytest.mark.parametrize("kwargs", [{}, {"_sudo": False, "path": "/etc"}, {"_env": {"A": "1"}, "_retries": 0}])
@pytest.mark.parametrize("deploy_data", [None, {"_chdir": "/deploy", "_preserve_sudo_env": True}])
def test_global_arguments_from_the_host_data_are_pyinfras(kwargs: dict, deploy_data: dict | None) -> None:
    state, host = _layered_host()
    host.current_deploy_data = deploy_data
    theirs_kwargs, ours_kwargs = dict(kwargs), dict(kwargs)
    theirs = planning._PYINFRA_POP_GLOBAL_ARGUMENTS(state, host, theirs_kwargs)
    data = host.data
    ours = planning.pop_global_arguments(state, host, ours_kwargs)
    assert ours == theirs and ours_kwargs == theirs_kwargs  # the same values, the same keys popped
    assert host.data is data  # the snapshot is gone once the call returns
    assert ours[0]["_sudo_user"] == "lab" and ours[0]["_timeout"] == 30  # the layers really were read
    assert ours[0]["_preserve_sudo_env"] is bool(deploy_data) and ours[0]["_chdir"] == "/srv"


def test_a_value_from_the_snapshot_is_a_copy() -> None:
    _, host = _layered_host()
    snapshot = planning.DataSnapshot(host.data)
    snapshot._env["ADDED"] = "by a caller"
    assert host.data._env == {"FROM": "host"} and snapshot._env == {"FROM": "host"}
    with pytest.raises(AttributeError):
        snapshot.not_in_any_layer  # noqa: B018 - the lookup is the test


def test_the_snapshot_is_gone_when_pyinfra_raises() -> None:
    state, host = _layered_host()
    data = host.data
    with pytest.raises(Exception, match="_sudo"):
        planning.pop_global_arguments(state, host, {"_sudo": "not a bool"})
    assert host.data is data
