"""What runs as PID 1: rigforge's units need systemd, and a dry run on a host without it says so and plans on."""

from __future__ import annotations

from pyinfra.api import FactBase

SYSTEMD = "systemd"


def parse_init_system(text: str) -> str:
    """``systemd`` when systemd runs the host (/run/systemd/system exists), else PID 1's name ("" when unreadable).

    >>> parse_init_system("systemd\\nsystemd-running"), parse_init_system("process_api")
    ('systemd', 'process_api')
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "systemd-running" in lines:
        return SYSTEMD
    return lines[0] if lines else ""


class InitSystem(FactBase[str]):
    """
    Returns ``systemd`` when systemd is the host's init system, else the name of PID 1 (a container's or a VM's
    own init, e.g. ``process_api``, ``sleep``).

    .. code:: python

        if host.get_fact(InitSystem) != "systemd":
            ...
    """

    def command(self) -> str:
        return "cat /proc/1/comm 2>/dev/null; test -d /run/systemd/system && echo systemd-running; true"

    def process(self, output: list[str]) -> str:
        return parse_init_system("\n".join(output))
