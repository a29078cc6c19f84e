"""The benchmark is a measurement: pyinfra's planning sees no change from it, execution gets the run.

Driven through pyinfra's own API (state, inventory, the operation decorator) on the ``@local``
host, without connecting anywhere: only the planning and the command generation are exercised.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyinfra.api import Config, FunctionCommand, Inventory, State
from pyinfra.api.host import Host
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_config, ctx_host, ctx_inventory, ctx_state

from rigforge.profile.loader import load_profile
from roles.bench import run_smoke_benchmark, smoke_benchmark


def only_op(state: State) -> str:
    """The hash of the one operation planned."""
    (op_hash,) = state.get_op_order()
    return op_hash


@pytest.fixture
def planning() -> Iterator[tuple[State, Host]]:
    """A pyinfra state in its Prepare stage, checking for changes as ``--dry`` and a real run both do."""
    inventory = Inventory((["@local"], {}))
    state = State(inventory, Config())
    host = inventory.get_host("@local")
    state.set_stage(StateStage.Prepare)
    with ctx_state.use(state), ctx_inventory.use(inventory), ctx_config.use(state.config), ctx_host.use(host):
        yield state, host


def test_planning_counts_no_change_and_execution_yields_the_run(planning: tuple[State, Host]) -> None:
    state, host = planning
    profile = load_profile("sandbox")

    meta = smoke_benchmark(name="Smoke benchmark", profile=profile, results_dir="results")

    assert meta.will_change is False  # what --dry --json reports as hosts_with_change
    assert state.get_meta_for_host(host).ops_change == 0
    state.is_executing = True
    (command,) = state.get_op_data_for_host(host, only_op(state)).command_generator()
    assert isinstance(command, FunctionCommand) and command.function is run_smoke_benchmark
    assert command.args[0] == profile and command.args[1] == Path("results")


def test_execution_passes_the_connector_arguments_on(planning: tuple[State, Host]) -> None:
    state, host = planning
    smoke_benchmark(name="Smoke benchmark", profile=load_profile("sandbox"), results_dir="r", _sudo=True)

    state.is_executing = True
    (command,) = state.get_op_data_for_host(host, only_op(state)).command_generator()
    connector = command.args[2]
    assert connector["_sudo"] is True  # a sudo rig runs, uploads and downloads as root like every other op
    assert "_if" not in connector and "name" not in connector
