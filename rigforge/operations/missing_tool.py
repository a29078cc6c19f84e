"""A tool the plan needs that the host lacks: a real run stops before any change, a dry run notes it and plans on.

pyinfra prepares every operation before it runs any, and an ``OperationError`` raised while preparing ends the
whole run there: right for a real run (nothing changed yet, on any host), wrong for a dry run, which is where
an owner wants the whole plan. So under ``--dry`` the missing tool is one red line, the host counts as failed
(the dry run exits non-zero) and the other layers are planned and shown.
"""

from __future__ import annotations

import sys
from typing import Any

from pyinfra import host, logger, state
from pyinfra.api import OperationError
from pyinfra.context import ctx_host
from pyinfra.operations import systemd

from rigforge.facts.init_system import SYSTEMD, InitSystem


def dry_run(argv: list[str] | None = None) -> bool:
    """pyinfra's ``--dry`` (its CLI keeps the flag to itself, so the command line is read).

    >>> dry_run(["pyinfra", "inventory/local.py", "deploys/full.py", "--dry"]), dry_run(["pyinfra", "-y"])
    (True, False)
    """
    return "--dry" in (sys.argv if argv is None else argv)[1:]


def missing_tool(line: str) -> None:
    """Say that a tool is missing: raise (a real run: stop before any change), or, in a dry run, log it, count
    the host as failed and return so the plan goes on.

    + line: what is missing and what to do, e.g. ``update-initramfs is not installed (...)``

    Example: ``if not tools.update_initramfs: missing_tool("update-initramfs is not installed"); return``
    """
    if not dry_run():
        raise OperationError(line)
    host.log_styled(f"{line}; a run stops here before any change (the dry run plans on)", fg="red",
                    log_func=logger.error)
    state.failed_hosts.add(ctx_host.get())  # the Host itself: the dry run exits non-zero


def service_unit(**arguments: Any) -> None:
    """pyinfra's ``systemd.service`` with ``arguments``; in a dry run on a host whose init is not systemd (a
    container, a VM with its own init), a missing-tool note instead, so the plan goes on.

    + arguments: ``systemd.service``'s (``name``, ``service``, ``running``, ``enabled``…)

    Example: ``service_unit(name="Enable nvidia-persistenced", service="nvidia-persistenced.service", enabled=True)``
    """
    # Read only in a dry run: a real run adds no command to the rig's one round trip.
    init = host.get_fact(InitSystem) if dry_run() else SYSTEMD
    if init != SYSTEMD:
        missing_tool(f"systemd is not running (PID 1 is {init or 'unreadable'}): {arguments['service']} cannot be "
                     "enabled or started, and rigforge's units need systemd")
        return
    systemd.service(**arguments)
