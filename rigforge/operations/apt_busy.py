"""Before rigforge's own apt commands: wait while another process holds apt's lock, and finish what dpkg
left unfinished.

**apt busy.** unattended-upgrades runs right after a boot (and rigforge reboots rigs), an owner may be
upgrading by hand: ``apt-get`` then fails at once with ``E: Could not get lock /var/lib/dpkg/lock-frontend.
It is held by process …``. apt and dpkg take POSIX ``fcntl`` locks on ``/var/lib/dpkg/lock-frontend`` and
``/var/lib/dpkg/lock`` (installs), ``/var/cache/apt/archives/lock`` (downloads) and
``/var/lib/apt/lists/lock`` (``apt-get update``). Before the first apt command of an operation that has
something to do, a shell loop on the host reads ``/proc/locks`` for those files' inodes (``flock`` locks
do not stop apt and are not counted; a holder must have the file open), and while one is held prints who
holds it (pid and command line) every 30 s with the time waited, up to the profile's
``apt.lock_wait_minutes``; then the host fails with one line naming the holder and the setting. The holder
is never stopped. Every ``apt-get`` also gets ``-o DPkg::Lock::Timeout=<the same seconds>``: apt's own,
silent wait covers a lock taken again between the loop and the command.

Checked on a sandbox host (apt 2.6.1, dpkg 1.21.22): with lock-frontend held, ``apt-get install`` waits
under ``DPkg::Lock::Timeout`` then fails (exit 100), ``apt-mark hold`` fails at once (dpkg
--set-selections), ``apt-get update`` runs (it needs only the lists lock); with the lists lock held,
``apt-get update`` fails at once whatever ``DPkg::Lock::Timeout`` says. The loop waits for all four
files: an update is always followed by an install that needs the others.

The loop's lines reach the terminal as they come, at any verbosity (pyinfra shows a command's output only
with ``-vvv`` or after it failed): the command is run with live output, and when it fails its output is
not printed a second time.

**dpkg unfinished.** Before the first install of a run, when ``DpkgUnfinished`` finds packages
dpkg left unpacked or half-configured (or a journal of a cut-off run), ``dpkg --configure -a`` finishes
them, keeping the owner's configuration files (``--force-confdef --force-confold``), and the run says
which. A half-installed package (its files in an unknown state) cannot be finished that way: when the record
of rigforge's own transaction that was cut short names it (``AptTransactionRecord``, read only then), the run
says so in one line and reinstalls it at the recorded version after ``dpkg --configure -a`` (or finishes the
purge it was in); any other one is the owner's, and it stops the host before any change, with the fix.
"""

from __future__ import annotations

import math
import shlex
from typing import Any
from weakref import WeakKeyDictionary

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, OperationError, QuoteString, StringCommand
from pyinfra.api.host import Host
from pyinfra.connectors.util import CommandOutput
from pyinfra.context import ctx_host

from rigforge.context import current_profile
from rigforge.facts.apt_transaction import TRANSACTION_RECORD, AptTransaction, AptTransactionRecord, RecordedPackage
from rigforge.facts.dpkg_state import DpkgState, DpkgUnfinished, UnfinishedPackage
from rigforge.operations.apt_record import forget_command, recorded
from rigforge.operations.docker import LiveOutputCommand
from rigforge.operations.secure_boot import log_refusal

#: Lock files apt and dpkg take with fcntl: install, download, list update.
LOCK_FILES = ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock", "/var/cache/apt/archives/lock",
              "/var/lib/apt/lists/lock")
SETTING = "apt.lock_wait_minutes"
REPORT_EVERY_S = 30
POLL_S = 2
APT_ENV = "DEBIAN_FRONTEND=noninteractive"
CONFIGURE_ALL = "dpkg --force-confdef --force-confold --configure -a"

# Per host (a Host object lives for one run): the operation that finishes dpkg's leftovers, the first install.
# pyinfra runs an operation's body twice, to plan and to execute: the same operation gets the repair both times.
_repair_op: WeakKeyDictionary[Host, str | None] = WeakKeyDictionary()


class LiveCommand(LiveOutputCommand):
    """A command whose lines are printed as they come; when it fails they are not printed a second time."""

    def execute(self, state: Any, host: Any, connector_arguments: dict) -> tuple[bool, CommandOutput]:
        status, output = super().execute(state, host, connector_arguments)
        return status, (output if status else CommandOutput([]))


def wait_seconds(minutes: float) -> int:
    """The profile's ``apt.lock_wait_minutes`` in whole seconds (rounded up)."""
    return math.ceil(minutes * 60)


def _minutes_text(minutes: float) -> str:
    return f"{minutes:g}"


def lock_wait_script(minutes: float, every_s: int = REPORT_EVERY_S, poll_s: int = POLL_S,
                     lock_files: tuple[str, ...] = LOCK_FILES) -> str:
    """The POSIX shell loop that waits until no process holds apt's locks, at most ``minutes`` (pure).

    + minutes: the bound (``apt.lock_wait_minutes``)
    + every_s: seconds between two progress lines
    + poll_s: seconds between two looks at ``/proc/locks``
    + lock_files: the files whose fcntl locks count

    Prints ``apt is busy: pid N (command line) holds FILE; waited S s of at most W s (apt.lock_wait_minutes)``
    when the wait starts and every ``every_s`` seconds, and ``apt's lock is free after S s`` when it ends
    after a wait; exits 1 with one line on stderr naming the holder and the setting when the bound passes.
    """
    wait_s = wait_seconds(minutes)
    setting = f"{SETTING}: {_minutes_text(minutes)}"
    q = shlex.quote
    # A /proc/locks line: "1: POSIX  ADVISORY  WRITE 6230 08:01:1234567 0 EOF"; a waiter's has "->" second.
    # FLOCK locks do not conflict with apt's fcntl locks. An OFD lock shows pid -1 (its owner is not named).
    holders = (
        "holders() { seen=' '; out=''; "
        f"for f in {' '.join(q(path) for path in lock_files)}; do "
        "ino=$(stat -L -c %i \"$f\" 2>/dev/null) || continue; "
        "for pid in $(awk -v ino=\"$ino\" '($2==\"POSIX\"||$2==\"OFDLCK\"){split($6,d,\":\"); "
        "if (d[3]==ino) print $5}' /proc/locks); do "
        "case \"$seen\" in *\" $pid \"*) continue;; esac; "
        "if [ \"$pid\" = -1 ]; then who='a process (open file description lock)'; "
        "else ls -l /proc/$pid/fd 2>/dev/null | grep -q -- \"-> $f\\$\" || continue; "
        "cmd=$(tr '\\000' ' ' < /proc/$pid/cmdline 2>/dev/null | cut -c1-160 | sed 's/ *$//'); "
        "[ -n \"$cmd\" ] || cmd=$(cat /proc/$pid/comm 2>/dev/null); "
        "who=\"pid $pid ($cmd)\"; fi; "
        "seen=\"$seen$pid \"; out=\"${out:+$out; }$who holds $f\"; "
        "done; done; printf '%s' \"$out\"; }"
    )
    loop = (
        "start=$(date +%s); next=0; "
        "while h=$(holders); [ -n \"$h\" ]; do "
        "waited=$(( $(date +%s) - start )); "
        f"if [ \"$waited\" -ge {wait_s} ]; then "
        f"echo \"apt is busy: $h; gave up after $waited s ({setting}); nothing was stopped: "
        f"run again once it is done, or raise {SETTING}\" >&2; exit 1; fi; "
        "if [ \"$waited\" -ge \"$next\" ]; then "
        f"echo \"apt is busy: $h; waited $waited s of at most {wait_s} s ({SETTING})\"; "
        f"next=$(( (waited / {every_s} + 1) * {every_s} )); fi; "
        f"sleep {poll_s}; done; "
        # next is past 0 once a line said apt was busy.
        "if [ \"$next\" -gt 0 ]; then echo \"apt's lock is free after $(( $(date +%s) - start )) s\"; fi"
    )
    return f"{holders}; {loop}"


def lock_wait(minutes: float) -> StringCommand:
    """The command that waits for apt's lock (``lock_wait_script``), its lines shown as they come."""
    return LiveCommand("sh", "-c", QuoteString(lock_wait_script(minutes)))


def apt_get(*arguments: str, minutes: float) -> StringCommand:
    """``apt-get`` non-interactive, with apt's own lock wait bounded like the loop's."""
    return StringCommand(APT_ENV, "apt-get", "-o", f"DPkg::Lock::Timeout={wait_seconds(minutes)}", *arguments)


def install_arguments(*packages: str, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """``apt-get``'s arguments for an install that never removes a package: where a conflict would make apt
    remove one (an owner's Docker CE, a driver), apt stops with ``E: Packages need to be removed but remove is
    disabled.`` instead. Removing what the owner installed is only ever an explicit purge (``--data
    replace_driver=true``). Checked on a sandbox host (apt 2.6.1): postfix over exim4-daemon-light exits 100
    with that line, exim4 still installed."""
    return ("install", "-y", "-qq", "--no-install-recommends", "--no-remove", *extra, *packages)


def apt_install(*packages: str, minutes: float, extra: tuple[str, ...] = ()) -> list[StringCommand]:
    """``apt-get install`` (``install_arguments``) as a transaction of rigforge's: recorded on the rig first,
    the record removed when it ends (rigforge/operations/apt_record.py)."""
    arguments = install_arguments(*packages, extra=extra)
    return recorded(arguments, apt_get(*arguments, minutes=minutes))


def apt_mark(*arguments: str) -> StringCommand:
    """``apt-mark``: its hold runs ``dpkg --set-selections``, which takes dpkg's lock and does not wait for it
    (``DPkg::Lock::Timeout`` does not reach it: checked, apt 2.6.1), so only the loop before it waits."""
    return StringCommand("apt-mark", *arguments)


def profile_lock_wait() -> float:
    """The current host's ``apt.lock_wait_minutes``."""
    return current_profile().apt.lock_wait_minutes


def _unfinished(packages: list[UnfinishedPackage] | tuple[UnfinishedPackage, ...]) -> str:
    return ", ".join(package.describe() for package in packages)


def _ours(found: DpkgState, record: AptTransaction | None) -> list[tuple[UnfinishedPackage, RecordedPackage]]:
    """The packages dpkg cannot finish that rigforge's own transaction, cut short, was handling."""
    if record is None:
        return []
    return [(package, mine) for package in found.needs_reinstall if (mine := record.find(package.name))]


def _finishing(ours: list[tuple[UnfinishedPackage, RecordedPackage]],
               minutes: float) -> list[tuple[str, list[StringCommand]]]:
    """What finishes rigforge's own half-done packages, as said and as commands: the removal they were in
    (dpkg's own, forced past the reinstall-required flag: apt refuses to remove such a package), then a
    reinstall at the recorded version, itself recorded. Checked on a sandbox host (dpkg 1.21.22, apt 2.6.1)."""
    steps: list[tuple[str, list[StringCommand]]] = []
    for action, flag in (("remove", "--remove"), ("purge", "--purge")):
        names = [package.name for package, mine in ours if mine.action == action]
        if names:
            command = StringCommand(APT_ENV, "dpkg", "--force-remove-reinstreq", flag, *names)
            steps.append((f"dpkg --force-remove-reinstreq {flag} {' '.join(names)}", [command]))
    reinstall = [f"{package.name}={mine.version}" for package, mine in ours if mine.action == "install"]
    if reinstall:
        arguments = install_arguments(*reinstall, extra=("--reinstall",))
        steps.append((f"apt-get install --reinstall {' '.join(reinstall)}",
                      recorded(arguments, apt_get(*arguments, minutes=minutes))))
    elif steps:
        steps[-1][1].append(forget_command())
    return steps


def repair_line(found: DpkgState, record: AptTransaction | None = None) -> str:
    """What the run says before it finishes what dpkg left (pure)."""
    ours = _ours(found, record)
    configurable = [package for package in found.packages if package.configurable]
    journal = " (and dpkg's journal of an interrupted run)" if configurable and found.journal_pending else ""
    if not ours:
        left = f"{_unfinished(configurable)} left unfinished" if configurable else "an interrupted dpkg run"
        return f"dpkg: {left}{journal}; finishing with {CONFIGURE_ALL} before installing"
    started = f", started {record.started}" if record and record.started else ""
    also = f"; also left unfinished: {_unfinished(configurable)}{journal}" if configurable else ""
    then = ", then ".join(said for said, _ in _finishing(ours, 0))
    return (f"dpkg: rigforge's own apt transaction was cut short ({TRANSACTION_RECORD}{started}): "
            f"{_unfinished([package for package, _ in ours])}{also}; finishing it: {CONFIGURE_ALL}, then {then}")


def reinstall_line(found: DpkgState, record: AptTransaction | None = None) -> str:
    """Why the host stops when dpkg left a package of the owner's it cannot finish, with the fix (pure)."""
    mine = {package.name for package, _ in _ours(found, record)}
    broken = [package for package in found.needs_reinstall if package.name not in mine]
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
    + record: rigforge's own transaction that was cut short (read only when dpkg shows such a package)
    + minutes: apt's lock wait bound, for the reinstall
    """
    ours = _ours(found, record)
    if len(ours) < len(found.needs_reinstall):
        raise OperationError(reinstall_line(found, record))
    if not found.needs_configure and not ours:
        return []
    line = repair_line(found, record)
    commands: list[StringCommand] = [
        LiveCommand("sh", "-c", QuoteString(f"echo {shlex.quote(line)}; {APT_ENV} {CONFIGURE_ALL}"))]
    for _, finishing in _finishing(ours, minutes):
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
    # The record of rigforge's own transaction is read only when dpkg shows a package it cannot finish.
    record = host.get_fact(AptTransactionRecord) if found.needs_reinstall else None
    try:
        repair = dpkg_repair(found, record, bound)
    except OperationError as refused:  # the owner's package: stop here, before the lock wait or any change
        return refusal(str(refused))
    if repair:
        _repair_op[this_host] = this_op
        if not state.is_executing:  # while executing, the command itself says it
            host.log(repair_line(found, record))
    return commands + repair
