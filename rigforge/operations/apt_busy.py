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

**dpkg unfinished** (rigforge/operations/dpkg_repair.py, whose ``before_apt`` every apt operation of
rigforge's yields first: this lock wait, then the repair).
"""

from __future__ import annotations

import math
import shlex
from typing import Any

from pyinfra.api import QuoteString, StringCommand
from pyinfra.connectors.util import CommandOutput

from rigforge.context import base_profile
from rigforge.operations.apt_record import recorded
from rigforge.operations.docker import LiveOutputCommand

#: Lock files apt and dpkg take with fcntl: install, download, list update.
LOCK_FILES = ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock", "/var/cache/apt/archives/lock",
              "/var/lib/apt/lists/lock")
SETTING = "apt.lock_wait_minutes"
REPORT_EVERY_S = 30
POLL_S = 2
APT_ENV = "DEBIAN_FRONTEND=noninteractive"
CONFIGURE_ALL = "dpkg --force-confdef --force-confold --configure -a"


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
    return base_profile().apt.lock_wait_minutes
