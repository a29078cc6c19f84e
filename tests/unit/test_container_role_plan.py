"""What the container role plans for each Docker a rig may already have (roles/container.py).

Planned through pyinfra's own API on the ``@local`` host without connecting anywhere: the facts the role
reads are answered from the values below (a rig's dpkg packages and engine state), and the commands of
each planned operation are generated as pyinfra's execution would.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pyinfra.api import Config, FunctionCommand, Inventory, State
from pyinfra.api.host import Host
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_config, ctx_host, ctx_inventory, ctx_state

from rigforge.checks.docker_install import docker_install
from rigforge.facts.docker import DockerOwnerSetup, EngineState
from rigforge.facts.dpkg_state import DpkgState
from rigforge.facts.packages import InstalledPackage
from rigforge.profile.loader import load_profile
from roles.container import _install_engine

NO_SETUP = DockerOwnerSetup(cli=None, cli_package=None, daemon_keys=(), containers=())
CE = {name: InstalledPackage("5:28.5.1-1~debian.12~bookworm", held=False)
      for name in ("docker-ce", "docker-ce-cli", "containerd.io")}
STOPPED = EngineState(cli="/usr/bin/docker", server_version=None, runtimes=(), systemd_unit="inactive")
RUNNING = EngineState(cli="/usr/bin/docker", server_version="28.5.1", runtimes=("runc",), systemd_unit="active")
NOTHING = EngineState(cli=None, server_version=None, runtimes=(), systemd_unit="inactive")


@pytest.fixture
def planning() -> Iterator[tuple[State, Host]]:
    # apt operations read the profile's apt settings (how long to wait for apt's lock).
    inventory = Inventory((["@local"], {"rigforge_profile": load_profile("sandbox").model_dump(mode="json")}))
    state = State(inventory, Config())
    host = inventory.get_host("@local")
    state.set_stage(StateStage.Prepare)
    with ctx_state.use(state), ctx_inventory.use(inventory), ctx_config.use(state.config), ctx_host.use(host):
        yield state, host


def _plan(planning: tuple[State, Host], monkeypatch: pytest.MonkeyPatch, packages: dict,
          engine: EngineState, docker_running: bool) -> list[tuple[str, list[Any]]]:
    state, host = planning
    answers = {"DebPackages": {name: {p.version} for name, p in packages.items()},
               "SystemdStatus": {"docker.service": docker_running},
               "SystemdEnabled": {"docker.service": docker_running},
               "DpkgUnfinished": DpkgState()}
    monkeypatch.setattr(host, "get_fact", lambda fact, *a, **k: answers[fact.__name__])
    _install_engine(docker_install(packages, NO_SETUP), engine)
    state.is_executing = True
    plan = []
    for op_hash in state.get_op_order():
        commands = list(state.get_op_data_for_host(host, op_hash).command_generator())
        plan.append((state.get_op_meta(op_hash).names.pop(), commands))
    return plan


def _text(commands: list[Any]) -> list[str]:
    return [str(c) for c in commands if not isinstance(c, FunctionCommand)]


def test_stopped_docker_ce_is_started_never_replaced(planning, monkeypatch) -> None:
    plan = _plan(planning, monkeypatch, CE, STOPPED, docker_running=False)
    assert [name for name, _ in plan] == ["Keep docker.service enabled and running"]
    assert _text(plan[0][1]) == ["systemctl start docker.service", "systemctl enable docker.service"]


def test_running_docker_ce_plans_nothing(planning, monkeypatch) -> None:
    plan = _plan(planning, monkeypatch, CE, RUNNING, docker_running=True)
    assert [(name, _text(commands)) for name, commands in plan] == [("Keep docker.service enabled and running", [])]


def test_bare_rig_gets_docker_io(planning, monkeypatch) -> None:
    plan = _plan(planning, monkeypatch, {}, NOTHING, docker_running=False)
    assert [name for name, _ in plan] == ["Install the Docker engine (docker.io)",
                                          "Keep docker.service enabled and running"]
    assert any("install" in c and "docker.io" in c for c in _text(plan[0][1]))


def test_other_docker_without_an_engine_stops_the_host(planning, monkeypatch) -> None:
    state, host = planning
    podman = {"podman-docker": InstalledPackage("4.3.1+ds1-8+deb12u1", held=False)}
    plan = _plan(planning, monkeypatch, podman, NOTHING, docker_running=False)
    assert [name for name, _ in plan] == ["Keep the Docker found on the rig (never install docker.io over it)"]
    (command,) = plan[0][1]
    assert isinstance(command, FunctionCommand) and command.args == ("podman-docker 4.3.1+ds1-8+deb12u1",)
    assert host in state.failed_hosts  # a dry run exits non-zero too
