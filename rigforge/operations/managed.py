"""Remove files and units rigforge wrote once and the profile no longer wants.

Only files carrying rigforge's managed-by header are removed: a file of the same name written by
someone else is left alone (and reported).
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import StringCommand, operation
from pyinfra.api.command import QuoteString

from rigforge.facts.managed import ManagedByRigforge


@operation()
def absent(path: str, unit: str | None = None):
    """
    Remove ``path`` when it exists and carries the managed-by header; disable ``unit`` first.

    + path: absolute path of a file rigforge may have written
    + unit: the systemd unit that file defines, stopped and disabled before removal

    **Example:**

    .. code:: python

        absent(name="No ACS unit", path="/etc/systemd/system/rigforge-disable-acs.service",
               unit="rigforge-disable-acs.service")
    """
    ours = host.get_fact(ManagedByRigforge, path=path)
    if ours is None:
        host.noop(f"{path} does not exist")
        return
    if not ours:
        host.log(f"{path} exists but was not written by rigforge; left in place", logger.warning)
        host.noop(f"{path} is not rigforge's")
        return
    if unit:
        yield StringCommand("systemctl", "disable", "--now", QuoteString(unit))
    yield StringCommand("rm", "-f", QuoteString(path))
