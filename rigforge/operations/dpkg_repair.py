"""Before rigforge's own apt commands: finish what dpkg left unfinished (the lock wait is apt_busy.py's).

Before the first install of a run, when ``DpkgUnfinished`` finds packages dpkg left unpacked or half-
configured (or a journal of a cut-off run), ``dpkg --configure -a`` finishes them, keeping the owner's
configuration files (``--force-confdef --force-confold``), and the run says which. When the record of
rigforge's own transaction that was cut short names unfinished packages (``AptTransactionRecord``, read only
when dpkg shows some), the run says so in one line and, after ``dpkg --configure -a``, runs that transaction
again at its recorded versions: apt reinstalls what dpkg left half-installed (its files in an unknown state,
which ``--configure -a`` cannot finish) and completes what it left unpacked (or dpkg finishes the purge it was
in). A half-installed package the record does not name is the owner's: it stops the host before any change,
with the fix.
"""

from __future__ import annotations

import shlex
from weakref import WeakKeyDictionary

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, OperationError, QuoteString, StringCommand
from pyinfra.api.host import Host
from pyinfra.context import ctx_host

from rigforge.facts.apt_transaction import TRANSACTION_RECORD, AptTransaction, AptTransactionRecord, RecordedPackage
from rigforge.facts.dpkg_state import DpkgState, DpkgUnfinished, UnfinishedPackage
from rigforge.operations.apt_busy import (
    APT_ENV,
    CONFIGURE_ALL,
    LiveCommand,
    apt_get,
    install_arguments,
    lock_wait,
    profile_lock_wait,
)
from rigforge.operations.apt_record import forget_command, recorded
from rigforge.operations.secure_boot import log_refusal

# Per host (a Host object lives for one run): the operation that finishes dpkg's leftovers, the first install.
# pyinfra runs an operation's body twice, to plan and to execute: the same operation gets the repair both times.
_repair_op: WeakKeyDictionary[Host, str | None] = WeakKeyDictionary()


def _unfinished(packages: list[UnfinishedPackage] | tuple[UnfinishedPackage, ...]) -> str:
    return ", ".join(package.describe() for package in packages)


def _ours(found: DpkgState, record: AptTransaction | None) -> list[tuple[UnfinishedPackage, RecordedPackage]]:
    """The unfinished packages that rigforge's own transaction, cut short, was handling."""
    if record is None:
        return []
    return [(package, mine) for package in found.packages if (mine := record.find(package.name))]


def _owners(found: DpkgState, record: AptTransaction | None) -> list[UnfinishedPackage]:
    """The packages dpkg cannot finish that rigforge's own transaction was not handling: the owner's."""
    return [package for package in found.needs_reinstall if record is None or record.find(package.name) is None]


def _finishing(found: DpkgState, record: AptTransaction, minutes: float) -> list[tuple[str, list[StringCommand]]]:
    """What finishes rigforge's own transaction, as said and as commands: the removals it was in (dpkg's own,
    forced past the reinstall-required flag: apt refuses to remove such a package), then the recorded install
    again, every package at its recorded version: apt reinstalls what dpkg left half-installed and completes
    what it left unpacked (an upgrade's packages wait on each other: ``dpkg --configure -a`` alone cannot).
    Checked on sandbox hosts (dpkg 1.21.22, apt 2.6.1)."""
    reinstall = {package.name.split(":", 1)[0] for package, _ in _ours(found, record) if not package.configurable}
    steps: list[tuple[str, list[StringCommand]]] = []
    for action, flag in (("remove", "--remove"), ("purge", "--purge")):
        names = [package.name for package, mine in _ours(found, record) if mine.action == action]
        if names:
            command = StringCommand(APT_ENV, "dpkg", "--force-remove-reinstreq", flag, *names)
            steps.append((f"dpkg --force-remove-reinstreq {flag} {' '.join(names)}", [command]))
    pins = [f"{name}={mine.version}" for name, mine in record.packages.items() if mine.action == "install"]
    if pins:
        again = [pin for pin in pins if pin.split("=", 1)[0] in reinstall]
        # The recorded versions exactly, as the transaction asked for them (a rollback's were lower).
        arguments = install_arguments(*pins, extra=("--allow-downgrades",))
        said = (f"the same transaction again: apt-get install of its {len(pins)} package{'s' if len(pins) > 1 else ''} "
                f"at the recorded versions" + (f" (reinstalls {', '.join(again)})" if again else ""))
        steps.append((said, recorded(arguments, apt_get(*arguments, minutes=minutes))))
    elif steps:
        steps[-1][1].append(forget_command())
    return steps


def repair_line(found: DpkgState, record: AptTransaction | None = None) -> str:
    """What the run says before it finishes what dpkg left (pure)."""
    ours = _ours(found, record)
    configurable = [package for package in found.packages if package.configurable]
    journal = " (and dpkg's journal of an interrupted run)" if configurable and found.journal_pending else ""
    if record is None or not ours:
        left = f"{_unfinished(configurable)} left unfinished" if configurable else "an interrupted dpkg run"
        return f"dpkg: {left}{journal}; finishing with {CONFIGURE_ALL} before installing"
    mine = {package.name for package, _ in ours}
    others = [package for package in configurable if package.name not in mine]
    started = f", started {record.started}" if record.started else ""
    also = f"; also left unfinished: {_unfinished(others)}" if others else ""
    then = ", then ".join(said for said, _ in _finishing(found, record, 0))
    return (f"dpkg: rigforge's own apt transaction was cut short ({TRANSACTION_RECORD}{started}): "
            f"{_unfinished([package for package, _ in ours])}{also}{journal}; finishing it: {CONFIGURE_ALL}, "
            f"then {then}")


def reinstall_line(found: DpkgState, record: AptTransaction | None = None) -> str:
    """Why the host stops when dpkg left a package of the owner's it cannot finish, with the fix (pure)."""
    broken = _owners(found, record)
    names = " ".join(package.name for package in broken)
    # apt refuses any install while dpkg's journal is pending or a package is left unpacked: configure first.
    first = "dpkg --configure -a, then " if found.needs_configure else ""
    # apt cannot remove a package marked reinstall-required; dpkg can, when told to (checked, dpkg 1.21.22).
    return (f"dpkg left {_unfinished(broken)}: dpkg --configure -a cannot finish it and it is not a package "
            f"rigforge was installing (rigforge reinstalls only its own, recorded in {TRANSACTION_RECORD}); "
            f"nothing changed; fix: {first}apt-get install --reinstall {names} (or, to remove it: "
            f"dpkg --remove --force-remove-reinstreq {names}), then run again")


def dpkg_repair(found: DpkgState, record: AptTransaction | None = None,
                minutes: float = 10) -> list[StringCommand]:
    """The commands that finish what dpkg left (none when nothing); OperationError when a package dpkg cannot
    finish is the owner's (pure).

    + found: what dpkg left unfinished
    + record: rigforge's own transaction that was cut short (read only when dpkg shows unfinished packages)
    + minutes: apt's lock wait bound, for the transaction run again

    When rigforge's own transaction was cut short, ``dpkg --configure -a`` may fail on what waits for the rest
    of it; the transaction run again right after finishes those, or fails saying why.
    """
    if _owners(found, record):
        raise OperationError(reinstall_line(found, record))
    ours = _ours(found, record)
    if not found.needs_configure and not ours:
        return []
    line = repair_line(found, record)
    tolerate = " || true" if ours else ""
    commands: list[StringCommand] = [
        LiveCommand("sh", "-c", QuoteString(f"echo {shlex.quote(line)}; {APT_ENV} {CONFIGURE_ALL}{tolerate}"))]
    if record is not None and ours:
        for _, finishing in _finishing(found, record, minutes):
            commands += finishing
    return commands


def refusal(line: str) -> list[StringCommand]:
    """The one command of an apt operation that must stop its host with ``line`` before any change. A dry
    run never executes it: there the line is said while planning and the host counted as failed."""
    if not state.is_executing:
        host.log_styled(line, fg="red", log_func=logger.error)
        state.failed_hosts.add(ctx_host.get())
    return [FunctionCommand(log_refusal, (line,), {})]


def before_apt(minutes: float | None = None, installs: bool = True) -> list[StringCommand]:
    """The commands an apt operation with something to do yields before its own: the lock wait, then, once
    per host and run and only before an install, the repair of what dpkg left unfinished.

    Decided in full before the first command is yielded (a list, not a generator): pyinfra's dry run runs
    an operation only up to its first command, and the repair, its line and a refusal must show there.

    + minutes: the lock wait bound; None: the profile's ``apt.lock_wait_minutes``
    + installs: the operation installs packages (not only ``apt-get update`` or ``apt-mark``)
    """
    bound = profile_lock_wait() if minutes is None else minutes
    commands = [lock_wait(bound)]
    if not installs:
        return commands
    this_host, this_op = ctx_host.get(), host.current_op_hash
    chosen = _repair_op.setdefault(this_host, None)
    if chosen not in (None, this_op):
        return commands
    found = host.get_fact(DpkgUnfinished)
    # The record of rigforge's own transaction is read only when dpkg shows unfinished packages.
    record = host.get_fact(AptTransactionRecord) if found.packages else None
    try:
        repair = dpkg_repair(found, record, bound)
    except OperationError as refused:  # the owner's package: stop here, before the lock wait or any change
        return refusal(str(refused))
    if repair:
        _repair_op[this_host] = this_op
        if not state.is_executing:  # while executing, the command itself says it
            host.log(repair_line(found, record))
    return commands + repair
