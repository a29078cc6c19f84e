"""One deploy at a time per host: a lock file on the rig, taken first and released last by every deploy.

The lock is ``/var/lib/rigforge/deploy.lock`` (on disk, so it survives the host layer's reboot), one JSON
line naming its holder: the controller (``user@machine``, plus the machine id), the pyinfra process id and
its start time, the deploy file and since when. It is created with ``ln`` from a fully written temporary
file, so two runs racing for it cannot both win and nobody ever reads half a record.

A run that finds the lock held refuses on that host at once with one line naming the holder; pyinfra
stops that host and goes on with the others, and the run exits non-zero. The lock is taken over only when
its holder is certainly gone:

- the holder is a run from this same controller (same user, machine and machine id) whose process no
  longer exists (a run that failed on the host, or was interrupted by Ctrl-C or killed): taken over at
  once, with a line saying so;
- otherwise (another machine, or a live process) only with ``--data break_lock=true``, which the user
  gives after checking that the other run is gone. There is no age limit: an image build legitimately
  holds the lock for an hour or more.

Both operations plan nothing (they act only while the deploy executes), so a dry run neither takes nor
leaves a lock, and a converged rig's ``--dry --json`` still lists no change.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, QuoteString, StringCommand, operation
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS
from pyinfra.api.host import Host
from pyinfra.api.state import State
from pyinfra.context import ctx_state

from rigforge import planning
from rigforge.connection import lost as connection_lost
from rigforge.reads import read_ahead
from rigforge.reads.read_ahead import not_a_change

LOCK_DIR = "/var/lib/rigforge"
LOCK_PATH = f"{LOCK_DIR}/deploy.lock"
TAKE_NAME = "Take the deploy lock"
RELEASE_NAME = "Release the deploy lock"
#: The names of the lock's operations: they run on every executed deploy and change nothing of the rig.
LOCK_OPERATION_NAMES = (TAKE_NAME, RELEASE_NAME)


@dataclass(frozen=True)
class Holder:
    """Who holds (or wants) the lock: one pyinfra process on one controller."""

    controller: str
    machine_id: str
    pid: int
    pid_started: str
    deploy: str
    since: str

    def record(self) -> str:
        """The lock file's one line (stable key order, so a holder recognises its own lock byte for byte)."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    def same_controller(self, other: Holder) -> bool:
        return (self.controller, self.machine_id) == (other.controller, other.machine_id)


def parse_holder(text: str) -> Holder | None:
    """The holder a lock file names, None when the text is not a lock record."""
    try:
        data = json.loads(text.strip())
        return Holder(**{key: data[key] for key in Holder.__dataclass_fields__})
    except (ValueError, TypeError, KeyError):
        return None


def process_started(pid: int) -> str:
    """The start time of a process on this machine (clock ticks since boot, from /proc); '' where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 of proc(5), counted after the command name


def process_alive(pid: int, started: str) -> bool:
    """Whether the process ``pid`` that started at ``started`` still runs here (a reused pid does not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    now_started = process_started(pid)
    return not (started and now_started and now_started != started)


_THIS_RUN: list[Holder] = []


def this_run(deploy: str = "") -> Holder:
    """This pyinfra process as a lock holder: made once (by the first take), so every host and the release
    see the same record."""
    if not _THIS_RUN:
        try:
            machine_id = Path("/etc/machine-id").read_text().strip()[:12]
        except OSError:
            machine_id = ""
        _THIS_RUN.append(Holder(controller=f"{getpass.getuser()}@{socket.gethostname()}", machine_id=machine_id,
                                pid=os.getpid(), pid_started=process_started(os.getpid()), deploy=deploy,
                                since=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")))
    return _THIS_RUN[0]


def takeover_reason(held: Holder, me: Holder, holder_alive: bool, break_lock: bool) -> str | None:
    """Why the held lock may be taken over by ``me``, or None when this run must refuse."""
    if held.same_controller(me) and not holder_alive:
        return f"its run (pid {held.pid}, {held.deploy}) from this controller is gone"
    if break_lock:
        return "--data break_lock=true"
    return None


def refusal_line(host_name: str, held: Holder) -> str:
    """The one line a refused run prints for a host."""
    return (f"rigforge: {host_name} is being deployed by {held.controller} (pid {held.pid}, {held.deploy}) "
            f"since {held.since}; nothing done on it. Once that run is gone, `--data break_lock=true` takes over "
            f"the lock ({LOCK_PATH})")


def _take_command(record: str) -> StringCommand:
    temp = f"{LOCK_PATH}.new.$$"
    return StringCommand(
        "install", "-d", "-m", "755", LOCK_DIR, "&&", "printf", "'%s\\n'", QuoteString(record), ">", temp, "&&",
        "if", "ln", temp, LOCK_PATH, "2>/dev/null;", "then", "rm", "-f", temp + ";", "echo", "taken;",
        "else", "rm", "-f", temp + ";", "echo", "held;", "cat", LOCK_PATH, "2>/dev/null;", "fi",
    )


def _drop_command(record: str) -> StringCommand:
    """Remove the lock only while it still holds ``record`` (moved aside first: one remover wins)."""
    aside = f"{LOCK_PATH}.stale.$$"
    return StringCommand(
        "if", "[", '"$(cat', LOCK_PATH, '2>/dev/null)"', "=", QuoteString(record), "];", "then",
        "mv", "-f", LOCK_PATH, aside, "&&", "rm", "-f", aside + ";", "fi",
    )


def take_lock(state: State, host: Host, me: Holder, break_lock: bool, connector: dict[str, Any]) -> bool:
    """Take the lock for ``me`` on ``host``: free, ours already, or stale; False (one line logged) when held."""
    del state  # pyinfra passes it; the host carries everything needed here
    with not_a_change(host):  # the lock file is no fact any role reads: facts read ahead still hold
        return _take_lock(host, me, break_lock, connector)


def _take_lock(host: Host, me: Holder, break_lock: bool, connector: dict[str, Any]) -> bool:
    for _ in range(3):  # a holder may release or be taken over between two commands
        ok, output = host.run_shell_command(_take_command(me.record()), **connector)
        lines = output.stdout_lines
        if not ok or not lines:
            host.log(f"rigforge: could not write {LOCK_PATH}: {' '.join(output.stderr_lines)[-300:]}", logger.error)
            return False
        if lines[0].strip() == "taken":
            return True
        text = "\n".join(lines[1:])
        held = parse_holder(text)
        if held is None and not text.strip():
            continue  # released between our two looks at it
        if held is None:
            if not break_lock:
                host.log(f"rigforge: {LOCK_PATH} on {host.name} is not a lock record ({text[:120]!r}); nothing done "
                         "on it. `--data break_lock=true` replaces it", logger.error)
                return False
            host.run_shell_command(_drop_command(text), **connector)
            continue
        if held == me:
            return True
        reason = takeover_reason(held, me, process_alive(held.pid, held.pid_started), break_lock)
        if reason is None:
            host.log(refusal_line(host.name, held), logger.error)
            return False
        host.log(f"taking over the deploy lock held by {held.controller} since {held.since}: {reason}",
                 logger.warning)
        host.run_shell_command(_drop_command(held.record()), **connector)
    host.log(f"rigforge: could not take {LOCK_PATH} (it changed hands three times); try again", logger.error)
    return False


def _connector_arguments() -> dict[str, Any]:
    arguments = host.current_op_global_arguments or {}
    return {key: value for key, value in arguments.items() if key in CONNECTOR_ARGUMENT_KEYS}


@operation(is_idempotent=False)
def deploy_lock_taken(deploy: str, break_lock: bool = False):
    """
    Take the host's deploy lock for this run, or stop this host with one line naming who holds it.

    + deploy: the deploy file this run executes (recorded in the lock for the next one to read)
    + break_lock: take the lock over whoever holds it (the user checked that run is gone)

    Plans nothing: the lock is taken only when the deploy executes, so a dry run never takes one.

    **Example:**

    .. code:: python

        deploy_lock_taken(name="Take the deploy lock", deploy="deploys/serve.py")
    """
    if not state.is_executing:
        host.noop(f"{LOCK_PATH} is taken when the deploy executes; planning never takes it")
        return
    yield FunctionCommand(take_lock, (this_run(deploy), break_lock, _connector_arguments()), {})


@operation(is_idempotent=False)
def deploy_lock_released():
    """
    Release the deploy lock this run took (a lock held by another run is left alone).

    **Example:**

    .. code:: python

        deploy_lock_released(name="Release the deploy lock")
    """
    if not state.is_executing:
        host.noop(f"{LOCK_PATH} is released when the deploy executes")
        return
    yield _drop_command(this_run().record())


def _deploy_name() -> str:
    # Read while pyinfra executes the deploy file, where take_deploy_lock is its first call.
    filename = state.current_exec_filename or "deploy"
    try:
        return os.path.relpath(filename)
    except ValueError:
        return filename


def take_deploy_lock() -> None:
    """First operation of every deploy: this host is ours for the run, or it stops here (module docstring).

    Before it, every host's facts are read ahead in one command each (``rigforge/reads/read_ahead.py``),
    pyinfra's per-operation bookkeeping is made cheap for fleets (``rigforge/planning.py``), and a rig that goes
    away mid-run becomes one line for that rig (``rigforge/connection/lost.py``).
    """
    from rigforge.context import run_settings

    planning.install()
    read_ahead.install()
    connection_lost.install()
    read_ahead.read_ahead(ctx_state.get(), _deploy_name())  # the State itself, not pyinfra's proxy
    deploy_lock_taken(name=TAKE_NAME, deploy=_deploy_name(), break_lock=run_settings().break_lock)


def release_deploy_lock() -> None:
    """Last line of every deploy: give the host back. A host that failed earlier keeps a lock its controller's
    next run takes over."""
    deploy_lock_released(name=RELEASE_NAME)
