"""Processes holding what a deploy needs: the GPUs' memory (``nvidia-smi --query-compute-apps``) and the
engine's port (``ss -ltnpH``), each with its cgroup, so rigforge's own engine (the unit
``rigforge-engine.service``, or its container ``rigforge-engine``) can be told from an owner's process;
and apt/dpkg's frontend lock (/proc/locks).

Every command exits 0 without nvidia-smi, ss or any holder, and gives an empty value then.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyinfra.api import FactBase

from rigforge.reads.parsing import first_number, split_sections
from rigforge.serving.engines import CONTAINER_NAME

ENGINE_CONTAINER_SECTION = "engine-container"
DPKG_FRONTEND_LOCK = "/var/lib/dpkg/lock-frontend"
_SS_USER = re.compile(r'\("([^"]*)",pid=(\d+)')


@dataclass(frozen=True)
class Holder:
    """A process holding a resource.

    + pid: as the host sees it
    + name: its command name (nvidia-smi's process_name, ss's users:(("name",...)))
    + cgroup: its cgroup v2 path (``/system.slice/rigforge-engine.service``), "" when unreadable
    + used_mib: GPU memory it holds (GPU processes only)
    + address: the address it listens on (port listeners only)
    """

    pid: int
    name: str
    cgroup: str = ""
    used_mib: float | None = None
    address: str = ""


@dataclass(frozen=True)
class Holders:
    """The holders of one resource, and the id of rigforge's engine container ("" when there is none)."""

    holders: tuple[Holder, ...]
    engine_container_id: str = ""


NO_HOLDERS = Holders(holders=())


def owner_command(pids: str) -> str:
    """Shell that prints ``## cgroup PID`` sections for the pids in variable ``pids`` and the engine container's id."""
    return (
        f"for p in ${pids}; do echo \"## cgroup $p\"; cat /proc/$p/cgroup 2>/dev/null; done; "
        f"if [ -n \"${pids}\" ] && command -v docker >/dev/null 2>&1; then echo '## {ENGINE_CONTAINER_SECTION}'; "
        f"docker inspect --format '{{{{.Id}}}}' {CONTAINER_NAME} 2>/dev/null; fi"
    )


def _cgroup(text: str) -> str:
    """The unified (v2) line ``0::/path`` of /proc/PID/cgroup; else the last line's path."""
    lines = [line for line in text.splitlines() if line.count(":") >= 2]
    unified = [line for line in lines if line.startswith("0::")]
    chosen = unified or lines[-1:]
    return chosen[0].split(":", 2)[2] if chosen else ""


def _with_owners(holders: list[Holder], sections: dict[str, str]) -> Holders:
    owned = tuple(Holder(holder.pid, holder.name, _cgroup(sections.get(f"cgroup {holder.pid}", "")),
                         holder.used_mib, holder.address) for holder in holders)
    container = sections.get(ENGINE_CONTAINER_SECTION, "").strip().splitlines()
    return Holders(holders=owned, engine_container_id=container[0].strip() if container else "")


def parse_compute_apps(text: str) -> Holders:
    """Parse ``nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader`` and the
    owner sections. Lines that are not ``PID, NAME, N MiB`` (nvidia-smi's own errors) are skipped."""
    sections = split_sections(text)
    holders = []
    for line in sections[""].splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) >= 3 and fields[0].isdigit():
            name = ",".join(fields[1:-1])
            holders.append(Holder(pid=int(fields[0]), name=name, used_mib=first_number(fields[-1])))
    return _with_owners(holders, sections)


class GpuComputeProcesses(FactBase[Holders]):
    """
    Returns the processes using the GPUs (pid, name, used memory) with their cgroups, as `Holders`;
    empty without nvidia-smi or a driver that answers.

    .. code:: python

        processes = host.get_fact(GpuComputeProcesses)
        hungry = [p for p in processes.holders if (p.used_mib or 0) > 1024]
    """

    def command(self) -> str:
        return (
            "if command -v nvidia-smi >/dev/null 2>&1; then "
            "a=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null); "
            "printf '%s\\n' \"$a\"; "
            "pids=$(printf '%s\\n' \"$a\" | cut -d, -f1 | grep -E '^[0-9]+$' | sort -u); "
            f"{owner_command('pids')}; fi; true"
        )

    @staticmethod
    def default() -> Holders:
        return NO_HOLDERS

    def process(self, output: list[str]) -> Holders:
        return parse_compute_apps("\n".join(output))


def parse_listeners(text: str) -> Holders:
    """Parse ``ss -ltnpH 'sport = :PORT'`` and the owner sections: one holder per process per socket.

    A line reads ``LISTEN 0 5 127.0.0.1:18081 0.0.0.0:* users:(("python3",pid=812,fd=3))``; without
    root, ss leaves out ``users:`` and the holder's pid reads 0.
    """
    sections = split_sections(text)
    holders = []
    for line in sections[""].splitlines():
        fields = line.split()
        if len(fields) < 5 or fields[0] != "LISTEN":
            continue
        users = _SS_USER.findall(line) or [("?", "0")]
        for name, pid in users:
            holder = Holder(pid=int(pid), name=name, address=fields[3])
            if holder not in holders:
                holders.append(holder)
    return _with_owners(holders, sections)


class PortListeners(FactBase[Holders]):
    """
    Returns the processes listening on a TCP port, with their cgroups, as `Holders`; empty when none does.

    + port: the TCP port

    .. code:: python

        listeners = host.get_fact(PortListeners, port=8000)
    """

    def command(self, port: int) -> str:
        return (
            # The pipelines run only when something listens: a free port, the usual case, forks one `ss`.
            f"a=$(ss -ltnpH 'sport = :{int(port)}' 2>/dev/null); if [ -n \"$a\" ]; then printf '%s\\n' \"$a\"; "
            "pids=$(printf '%s\\n' \"$a\" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); "
            f"{owner_command('pids')}; fi; true"
        )

    @staticmethod
    def default() -> Holders:
        return NO_HOLDERS

    def process(self, output: list[str]) -> Holders:
        return parse_listeners("\n".join(output))


def is_engine(holder: Holder, unit: str, engine_container_id: str) -> bool:
    """Whether ``holder`` is rigforge's engine: in the engine unit's cgroup, or in its container's scope."""
    parts = holder.cgroup.split("/")
    if unit in parts:
        return True
    return bool(engine_container_id) and any(engine_container_id in part for part in parts)


@dataclass(frozen=True)
class LockHolder:
    """A process holding a POSIX lock on dpkg's frontend lock file: its pid and command name."""

    pid: int
    command: str


def parse_lock_holders(text: str) -> tuple[LockHolder, ...]:
    """Parse the ``DpkgLockHolders`` output: ``## inode N``, the /proc/locks lines, ``## comm PID`` sections.

    /proc/locks lines read ``1: POSIX  ADVISORY  WRITE 6230 08:01:1234567 0 EOF``; waiters (``->``) are skipped.
    """
    sections = split_sections(text)
    inode = next((name.split()[1] for name in sections if name.startswith("inode ") and len(name.split()) == 2), None)
    if inode is None:
        return ()
    pids: list[int] = []
    for line in sections[f"inode {inode}"].splitlines():
        fields = line.split()
        if "->" in fields or len(fields) < 6 or not fields[4].isdigit():
            continue
        if fields[5].rsplit(":", 1)[-1] == inode and int(fields[4]) not in pids:
            pids.append(int(fields[4]))
    return tuple(LockHolder(pid, sections.get(f"comm {pid}", "").strip() or "?") for pid in pids)


class DpkgLockHolders(FactBase[tuple[LockHolder, ...]]):
    """
    Returns the processes holding apt/dpkg's frontend lock (``/var/lib/dpkg/lock-frontend``), read from
    /proc/locks by the file's inode: apt and dpkg take POSIX (fcntl) locks, which ``fuser`` and ``lsof``
    do not name as holders. Empty when nobody holds it.

    .. code:: python

        holders = host.get_fact(DpkgLockHolders)
        busy = ", ".join(f"{holder.command} (pid {holder.pid})" for holder in holders)
    """

    def command(self) -> str:
        return (
            f"i=$(stat -c %i {DPKG_FRONTEND_LOCK} 2>/dev/null); if [ -n \"$i\" ]; then echo \"## inode $i\"; "
            # The holders' names are looked up only when /proc/locks has the inode: apt idle forks one grep.
            "l=$(grep -E \":$i \" /proc/locks 2>/dev/null); if [ -n \"$l\" ]; then printf '%s\\n' \"$l\"; "
            "for p in $(printf '%s\\n' \"$l\" | grep -v -- '->' | awk '{print $5}' | sort -u); do "
            "echo \"## comm $p\"; cat /proc/$p/comm 2>/dev/null; done; fi; fi; true"
        )

    @staticmethod
    def default() -> tuple[LockHolder, ...]:
        return ()

    def process(self, output: list[str]) -> tuple[LockHolder, ...]:
        return parse_lock_holders("\n".join(output))
