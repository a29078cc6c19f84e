"""A rig that stops answering in the middle of a run: one line for that rig, and the other rigs go on.

When a rig loses power, its network or its sshd mid-run, paramiko's transport dies. pyinfra 3.10 meets
that in several ways: a command under way ends without an exit status (``Error: executed 0 commands``,
nothing saying why); the next fact read or command raises ``EOFError`` from paramiko's reader thread,
which pyinfra does not catch: "An internal exception occurred", a traceback, "consider submitting a bug
report", and every rig of the run stops. Here each of those becomes, for that rig only::

    [rig2x-a] connection lost during 'Host layer | Base | Install base packages' after 41 s: the rig went
    away (power, network or reboot); run the same deploy again — it resumes

pyinfra then drops the rig as for any failure, carries on with the others and exits non-zero.

How: the SSH connector's commands, uploads and downloads (``watched``) check, when paramiko fails or a
command fails, whether the transport is still alive. While the deploy executes, a dead transport raises
``RigWentAway``; it stops the operation wherever it comes from (a command, an upload, a fact read in the
operation's body, a Python callback), and ``_run_host_op`` turns it into the line and a failed
operation. While the deploy is planned (facts read by role code), the line is said at once and the read
fails as pyinfra fails any fact read, which drops the rig. Code that expects the connection to go (the
reboot's wait) catches ``RigWentAway`` like any other error. ``install()`` is called by the deploy lock,
first thing of every deploy; every SSH host is watched, the rigforge connector's and the sandbox's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from weakref import WeakKeyDictionary, WeakSet

from paramiko import SSHException
from pyinfra import logger
from pyinfra.api import FunctionCommand
from pyinfra.api import facts as pyinfra_facts
from pyinfra.api import operations as pyinfra_operations
from pyinfra.api.host import Host
from pyinfra.api.state import State
from pyinfra.connectors.ssh import SSHConnector
from pyinfra.connectors.util import CommandOutput

PLANNING = "planning the deploy"
#: What paramiko raises when its transport is gone (socket errors are OSErrors).
TRANSPORT_ERRORS = (EOFError, OSError, SSHException)


class RigWentAway(Exception):
    """The rig stopped answering: its SSH transport died in the middle of the run."""


def lost_line(operation: str, seconds: float) -> str:
    """The one line said for a rig whose connection was lost (pure).

    >>> lost_line("Install base packages", 41.2)[:57]
    "connection lost during 'Install base packages' after 41 s"
    """
    return (f"connection lost during '{operation}' after {seconds:.0f} s: the rig went away (power, network or "
            "reboot); run the same deploy again — it resumes")


def transport_alive(connector: Any) -> bool:
    """True while the connector's SSH transport is up (False before the first connect too)."""
    client = getattr(connector, "client", None)
    transport = client.get_transport() if client is not None else None
    return transport is not None and transport.is_active()


_reported: WeakSet[Host] = WeakSet()  # said once per rig and run
_met_in_callback: WeakKeyDictionary[Host, RigWentAway] = WeakKeyDictionary()
_planning_started = time.monotonic()


def _say(host: Host, operation: str, seconds: float) -> None:
    if host in _reported:
        return
    _reported.add(host)
    host.log_styled(lost_line(operation, seconds), fg="red", log_func=logger.error)


def _gone(connector: Any, failed: Any, cause: BaseException | None) -> Any:
    """A dead transport: raise while executing; while planning, say it and fail like a failed read."""
    if connector.state.is_executing:
        raise RigWentAway(f"{connector.host.name}: the SSH transport is gone") from cause
    _say(connector.host, PLANNING, time.monotonic() - _planning_started)
    return failed


def watched(method: Callable[..., Any], failed: Any) -> Callable[..., Any]:
    """``method`` of the SSH connector, turning a dead transport into ``RigWentAway`` (``_gone``).

    + failed: what the method returns on failure (``(False, CommandOutput([]))`` or ``False``)
    """

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.host in _reported:  # already gone this run: do not wait on it again
            return _gone(self, failed, None)
        try:
            result = method(self, *args, **kwargs)
        except TRANSPORT_ERRORS as exc:
            if transport_alive(self):
                raise
            return _gone(self, failed, exc)
        status = result[0] if isinstance(result, tuple) else result
        if not status and getattr(self, "client", None) is not None and not transport_alive(self):
            return _gone(self, failed, None)
        return result

    wrapper.__wrapped__ = method  # type: ignore[attr-defined]
    return wrapper


def _operation_name(state: State, op_hash: str) -> str:
    return ", ".join(sorted(state.get_op_meta(op_hash).names)) or op_hash


def _run_host_op(state: State, host: Host, op_hash: str) -> bool:
    """pyinfra's ``_run_host_op``: an operation that meets a rig gone away fails with the one line."""
    started = time.monotonic()
    try:
        succeeded = _original["run_host_op"](state, host, op_hash)
    except RigWentAway:
        _fail_operation(state, host, op_hash)
        succeeded = False
    else:
        if succeeded or _met_in_callback.pop(host, None) is None:
            return succeeded
    _say(host, _operation_name(state, op_hash), time.monotonic() - started)
    return succeeded


def _fail_operation(state: State, host: Host, op_hash: str) -> None:
    """What pyinfra records for a failed operation, for one that ended in ``RigWentAway``."""
    state.get_results_for_host(host).error_ops += 1
    meta = state.get_op_data_for_host(host, op_hash).operation_meta
    if not meta.is_complete():
        meta.set_complete(False, [], CommandOutput([]))
    state.trigger_callbacks("operation_host_error", host, op_hash, 0, 0)


def _execute_function(self: FunctionCommand, state: State, host: Host, connector_arguments: dict) -> Any:
    """A Python callback (the bench, a reboot's wait) that meets a rig gone away fails without a traceback."""
    try:
        return _original["function_execute"](self, state, host, connector_arguments)
    except RigWentAway as gone:
        _met_in_callback[host] = gone
        return False


def _quiet_when_gone(log: Callable[..., None]) -> Callable[..., None]:
    """pyinfra's per-host error line, left out for a rig whose loss was (or is about to be) said."""

    def wrapper(host: Host, *args: Any, **kwargs: Any) -> None:
        if host in _reported or host in _met_in_callback:
            return
        log(host, *args, **kwargs)

    return wrapper


_original: dict[str, Any] = {}


def install() -> None:
    """Watch every SSH connection and route operations through the handling above (once per process)."""
    global _planning_started
    if _original:
        return
    _planning_started = time.monotonic()
    _original["run_host_op"] = pyinfra_operations._run_host_op
    _original["function_execute"] = FunctionCommand.execute
    pyinfra_operations._run_host_op = _run_host_op
    FunctionCommand.execute = _execute_function  # type: ignore[method-assign]
    pyinfra_operations.log_error_or_warning = _quiet_when_gone(pyinfra_operations.log_error_or_warning)
    pyinfra_facts.log_error_or_warning = _quiet_when_gone(pyinfra_facts.log_error_or_warning)
    SSHConnector.run_shell_command = watched(SSHConnector.run_shell_command,  # type: ignore[method-assign]
                                             (False, CommandOutput([])))
    SSHConnector.put_file = watched(SSHConnector.put_file, False)  # type: ignore[method-assign]
    SSHConnector.get_file = watched(SSHConnector.get_file, False)  # type: ignore[method-assign]
