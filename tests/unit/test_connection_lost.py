"""A rig that goes away mid-run (rigforge/connection/lost.py), through pyinfra's own operation runner.

Here the rig is ``@local`` and what goes away is simulated, a FIXTURE made only to exercise the machinery: an
operation whose Python callback, or whose body, meets ``RigWentAway`` as the watched SSH connector raises it.
A transport that is not up is a real paramiko ``Transport`` never started. The real losses (a power cut, a
silent network drop, sshd killed, with the other rigs going on) are in tests/e2e/test_power_cut.py and
test_lost_connection.py.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from types import SimpleNamespace

import paramiko
import pyinfra
import pytest
from pyinfra.api import Config, FunctionCommand, Inventory, State, operation
from pyinfra.api.connect import connect_all
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops
from pyinfra.api.state import StateStage
from pyinfra.connectors.util import CommandOutput

from rigforge.connection import lost as connection_lost
from rigforge.connection.lost import RigWentAway, lost_line, transport_alive, watched


def test_the_line_says_what_was_under_way_how_long_and_what_to_do() -> None:
    assert lost_line("Host layer | Base | Install base packages", 41.4) == (
        "connection lost during 'Host layer | Base | Install base packages' after 41 s: the rig went away "
        "(power, network or reboot); run the same deploy again — it resumes")


@pytest.fixture
def dead_transport() -> Iterator[paramiko.Transport]:
    ours, theirs = socket.socketpair()
    transport = paramiko.Transport(ours)  # never started: not active, as one whose peer went away
    yield transport
    transport.close()
    theirs.close()


class Rig:
    """The part of pyinfra's Host the handling uses: its name and its log."""

    def __init__(self) -> None:
        self.name, self.said = "rig2x-a", []

    def log_styled(self, line: str, **kwargs: object) -> None:
        self.said.append(line)


def connector(transport: paramiko.Transport | None, executing: bool) -> SimpleNamespace:
    client = paramiko.SSHClient()
    client._transport = transport  # type: ignore[attr-defined]
    return SimpleNamespace(client=client, host=Rig(), state=SimpleNamespace(is_executing=executing))


def test_a_dead_transport_is_told_from_a_failed_command(dead_transport: paramiko.Transport) -> None:
    assert not transport_alive(SimpleNamespace(client=None))
    assert not transport_alive(connector(dead_transport, True))

    def eof(self: object) -> tuple[bool, CommandOutput]:
        raise EOFError

    def failed(self: object) -> tuple[bool, CommandOutput]:
        return False, CommandOutput([])

    with pytest.raises(RigWentAway):
        watched(eof, (False, CommandOutput([])))(connector(dead_transport, executing=True))
    with pytest.raises(RigWentAway):  # a command under way ends without an exit status when the transport dies
        watched(failed, (False, CommandOutput([])))(connector(dead_transport, executing=True))

    # While the deploy is planned, the read fails as pyinfra fails any read (the rig leaves the run), said once.
    planning = connector(dead_transport, executing=False)
    for _ in range(2):
        assert watched(eof, "failed")(planning) == "failed"
    assert len(planning.host.said) == 1
    assert planning.host.said[0].startswith("connection lost during 'planning the deploy' after ")


def gone_in_callback(state: State, host: object) -> bool:
    raise RigWentAway("rig2x-a: the SSH transport is gone")


@operation()
def long_step():
    """A step whose Python callback meets a rig gone away (FIXTURE)."""
    yield FunctionCommand(gone_in_callback, (), {})


def done(state: State, host: object) -> bool:
    return True


@operation()
def reads_then_acts():
    """A step whose body meets a rig gone away while it reads a fact (FIXTURE); while planning, as the watched
    connector does, the read would fail instead."""
    if pyinfra.state.is_executing:
        raise RigWentAway("rig2x-a: the SSH transport is gone")
    yield FunctionCommand(done, (), {})


@pytest.mark.parametrize(("op", "name"), [(long_step, "A long step"), (reads_then_acts, "Reads then acts")])
def test_an_operation_that_meets_it_fails_its_host_with_the_one_line(op: object, name: str,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    connection_lost.install()
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    state.set_stage(StateStage.Prepare)
    add_op(state, op, name=name)
    state.set_stage(StateStage.Execute)
    with caplog.at_level(logging.INFO), pytest.raises(PyinfraError, match="No hosts remaining"):
        run_ops(state)  # the only host failed
    said = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(said) == 1 and said[0].startswith(f"[@local] connection lost during '{name}' after 0 s"), said
    assert "Traceback" not in caplog.text and "Unexpected error" not in caplog.text
    (host,) = state.inventory
    assert host in state.failed_hosts
