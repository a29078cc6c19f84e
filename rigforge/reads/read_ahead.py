"""Read ahead: the facts a deploy read on a host last time, read again in one remote command as it starts.

pyinfra sends one remote command per fact read; a converged rig answered a no-op ``deploys/full.py``
with about fifty of them, one round trip each. Read-ahead makes that about one:

1. ``read_ahead(deploy)`` (called by ``take_deploy_lock``, the first call of every deploy) reads, for
   every active host at once, the reads the previous run of this deploy made on that host, as one
   combined command (``rigforge/reads/combined.py``: one section per fact, parsed by the fact's own
   parser, so every parser stays the one tested on real outputs). Reads whose commands add up past
   ``COMMAND_BUDGET`` (64 KiB) go in several: sshd drops a connection that sends it a packet over 256 KiB.
2. While nothing but reads has reached the host, ``host.get_fact`` answers from those values. The
   first command that may change it (an operation's command, an upload; taking the deploy lock
   excepted) drops the host's read-ahead: later reads go to the host one by one, as pyinfra does.
3. Every read of the run is recorded on the controller (``$XDG_CACHE_HOME/rigforge/reads/``) for the
   next run; a read not recorded yet (new code, a changed profile path) is read on its own and recorded. A fact
   class with ``read_ahead = False`` is neither (``git ls-remote``: a no-op run must not ask a remote).

Nothing gets less exact: pyinfra reads facts while it plans, before anything executes, so a value read
when the deploy starts is the value the plan would have read; with ``-y`` the plan runs while
executing and the first change drops the read-ahead. A section pyinfra would fail, default or warn on
is read again on its own; a missing or garbled section fails the host with an error naming the fact.
Only hosts reached through a shell connector (SSH, local, Docker) read ahead.
"""

from __future__ import annotations

import atexit
import copy
import json
import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gevent
import gevent.event
from pyinfra import logger
from pyinfra.api import facts as pyinfra_facts
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS
from pyinfra.api.host import Host
from pyinfra.api.state import State
from pyinfra.connectors.docker import DockerConnector
from pyinfra.connectors.local import LocalConnector
from pyinfra.connectors.ssh import SSHConnector

from rigforge.reads.combined import (
    CombinedReadError,
    FactRead,
    batches,
    combined_command,
    command_length,
    new_marker,
    section_value,
    split_sections,
)

SHELL_CONNECTORS = (SSHConnector, LocalConnector, DockerConnector)
RECORD_VERSION = 1


def reads_dir() -> Path:
    """Where each (deploy, host)'s reads are recorded: ``$RIGFORGE_READS_DIR`` or the user's cache folder."""
    if os.environ.get("RIGFORGE_READS_DIR"):
        return Path(os.environ["RIGFORGE_READS_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rigforge" / "reads"


def record_path(deploy: str, host_name: str) -> Path:
    safe = "".join(char if char.isalnum() or char in "-_." else "_" for char in f"{deploy}--{host_name}")
    return reads_dir() / f"{safe}.json"


def load_reads(path: Path) -> list[FactRead]:
    """The reads recorded at ``path``; none when it is missing or unreadable (it only saves time)."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(document, dict) or document.get("version") != RECORD_VERSION:
        return []
    reads = []
    for record in document.get("reads") or []:
        try:
            reads.append(FactRead.from_record(record))
        except (ValueError, TypeError):
            continue  # a fact renamed or re-signatured since: it is read on its own and recorded anew
    return reads


def save_reads(path: Path, reads: list[FactRead]) -> None:
    """Write the record atomically (two runs of one deploy may finish together)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps({"version": RECORD_VERSION, "reads": [read.to_record() for read in reads]},
                                    indent=1) + "\n")
    os.replace(temporary, path)


class HostReads:
    """One host's read-ahead values, whether they still hold, and the reads this run made."""

    def __init__(self, record: Path, executor: dict[str, Any]) -> None:
        self.record = record
        self.executor = executor  # the connector arguments the combined read ran with
        self.values: dict[FactRead, Any] = {}
        self.valid = True
        self.made: dict[FactRead, None] = {}  # ordered set
        self.quiet = 0  # >0 while a command that changes no fact runs (a fact read, the deploy lock)


_hosts: weakref.WeakKeyDictionary[Host, HostReads] = weakref.WeakKeyDictionary()
_started: weakref.WeakKeyDictionary[State, dict[str, gevent.event.Event]] = weakref.WeakKeyDictionary()
_to_save: list[HostReads] = []  # strong: pyinfra's state is gone by the time the process exits
_original_get_fact = pyinfra_facts._get_fact


def _reads_of(host: Host) -> HostReads | None:
    return _hosts.get(host)


def _executor_arguments(state: State, host: Host, fact: type, args: Any, kwargs: Any) -> tuple[dict, dict]:
    fact_kwargs, global_kwargs = pyinfra_facts._handle_fact_kwargs(state, host, fact, args, kwargs)
    return fact_kwargs, {key: value for key, value in global_kwargs.items() if key in CONNECTOR_ARGUMENT_KEYS}


def _read_host(state: State, host: Host, reads: list[FactRead], entry: HostReads) -> None:
    """Run one host's combined reads (as few commands as fit ``COMMAND_BUDGET``) and keep every section pyinfra
    would have turned into a value."""
    for batch in batches(reads, [command_length(read) for read in reads]):
        if not _read_batch(state, host, batch, entry):
            return


def _read_batch(state: State, host: Host, reads: list[FactRead], entry: HostReads) -> bool:
    """One combined command; False when the host could not answer it (the rest is read fact by fact)."""
    marker = new_marker()
    entry.quiet += 1
    try:
        status, output = host.run_shell_command(combined_command(reads, marker), print_output=state.print_fact_output,
                                                print_input=state.print_fact_input, **entry.executor)
    except Exception as exc:  # noqa: BLE001 - any connection trouble: pyinfra meets it again on its own reads
        logger.debug(f"{host.print_prefix}read-ahead skipped: {exc}")
        return False
    finally:
        entry.quiet -= 1
    if not status:
        logger.debug(f"{host.print_prefix}read-ahead failed; every fact is read on its own")
        return False
    try:
        sections = split_sections(output.stdout_lines, reads, marker)
    except CombinedReadError as exc:
        host.log_styled(f"rigforge: reading facts ahead: {exc}", fg="red", log_func=logger.error)
        state.fail_hosts({host})
        return False
    for read, section in zip(reads, sections, strict=True):
        served, value = section_value(read, section)
        if served:
            entry.values[read] = value
    logger.debug(f"{host.print_prefix}read ahead {len(entry.values)} of {len(reads)} facts in one command")
    return True


def read_ahead(state: State, deploy: str) -> None:
    """Read every active host's recorded facts for ``deploy``, all hosts at once (the first call per run
    does it; later calls, one per host as pyinfra runs the deploy code in parallel, wait until it is done:
    a host whose deploy code went on meanwhile would read each fact on its own)."""
    started = _started.setdefault(state, {})
    if deploy in started:
        started[deploy].wait()
        return
    done = started[deploy] = gevent.event.Event()
    try:
        _read_all_hosts(state, deploy)
    finally:
        done.set()


def _read_all_hosts(state: State, deploy: str) -> None:
    jobs = []
    for host in state.inventory.get_active_hosts():
        if not isinstance(host.connector, SHELL_CONNECTORS):
            continue
        _, executor = _executor_arguments(state, host, object, None, None)  # no fact arguments: host defaults
        entry = HostReads(record_path(deploy, host.name), executor)
        _hosts[host] = entry
        _to_save.append(entry)
        reads = load_reads(entry.record)
        if reads:
            if not host.connected:
                try:
                    host.connect(reason="to read facts ahead", raise_exceptions=True)
                except Exception as exc:  # noqa: BLE001 - this call may be another host's: it must not fail it
                    logger.debug(f"{host.print_prefix}read-ahead skipped: {exc}")
                    continue
            jobs.append(gevent.spawn(_read_host, state, host, reads, entry))
    gevent.joinall(jobs, raise_error=True)


def _get_fact(state: State, host: Host, cls: type, args: Any = None, kwargs: Any = None,
              ensure_hosts: Any = None, apply_failed_hosts: bool = True) -> Any:
    """pyinfra's ``_get_fact``, answered from the read-ahead while it holds, and recorded."""
    entry = _reads_of(host)
    if entry is None:
        return _original_get_fact(state, host, cls, args, kwargs, ensure_hosts, apply_failed_hosts)
    read = None
    try:
        fact_kwargs, executor = _executor_arguments(state, host, cls, args, kwargs)
        # A fact with ``read_ahead = False`` (a remote repository asked only when needed) is never recorded.
        if executor == entry.executor and not cls.shell_executable and getattr(cls, "read_ahead", True):
            read = FactRead.of(cls, **{key: value for key, value in fact_kwargs.items() if key != "self"})
    except TypeError:
        read = None  # arguments that are not JSON values: read on its own, not recorded
    if read is not None:
        entry.made[read] = None
        if entry.valid and read in entry.values:
            message = f"{host.print_prefix}Loaded fact {cls.__name__} (read ahead)"
            (logger.info if state.print_fact_info else logger.debug)(message)
            return copy.deepcopy(entry.values[read])
    entry.quiet += 1
    try:
        return _original_get_fact(state, host, cls, args, kwargs, ensure_hosts, apply_failed_hosts)
    finally:
        entry.quiet -= 1


@contextmanager
def not_a_change(host: Host) -> Iterator[None]:
    """Commands sent inside this block change no fact (the deploy lock's file): the read-ahead holds."""
    entry = _reads_of(host)
    if entry is not None:
        entry.quiet += 1
    try:
        yield
    finally:
        if entry is not None:
            entry.quiet -= 1


def _dropping_on_change(method: Any) -> Any:
    def wrapper(self: Host, *args: Any, **kwargs: Any) -> Any:
        entry = _reads_of(self)
        if entry is not None and entry.valid and not entry.quiet:
            entry.valid = False
            logger.debug(f"{self.print_prefix}read-ahead dropped: a command may change the host")
        return method(self, *args, **kwargs)

    wrapper.__wrapped__ = method  # type: ignore[attr-defined]
    return wrapper


def _save_all() -> None:
    for entry in _to_save:
        if entry.made:
            try:
                save_reads(entry.record, list(entry.made))
            except OSError as exc:  # only a slower next run
                logger.debug(f"read-ahead record {entry.record} not written: {exc}")


def install() -> None:
    """Route pyinfra's fact reads and host commands through the read-ahead (once per process)."""
    if pyinfra_facts._get_fact is _get_fact:
        return
    pyinfra_facts._get_fact = _get_fact
    Host.run_shell_command = _dropping_on_change(Host.run_shell_command)
    Host.put_file = _dropping_on_change(Host.put_file)
    atexit.register(_save_all)
