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


def test_install_puts_both_where_pyinfra_looks_them_up() -> None:
    planning.install()
    planning.install()
    assert pyinfra_operation.get_operation_order_from_stack is planning.operation_order_from_stack
    assert pyinfra_arguments.all_global_arguments is planning.all_global_arguments
