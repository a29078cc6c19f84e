"""A secret copied on the rig for one reader: the file stays on the rig, its content never passes through here.

Compared by sha256 (a hash, never the secret), owner, group and mode; copied with ``install`` when any differs, so
the copy appears whole and with its final mode (never readable by others, not for a moment).

Example::

    secret_copy(name="Engine key for Prometheus", source="/etc/rigforge/secrets/engine-api-key",
                dest="/etc/prometheus/rigforge/keys/rig1", group="prometheus")
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation
from pyinfra.facts.files import File, Sha256File


@operation()
def secret_copy(source: str, dest: str, group: str, mode: str = "640"):
    """
    Copy the rig's file ``source`` to ``dest`` (owner root, ``group``, ``mode``) when the copy differs.

    + source: a secret file on the rig (left as it is)
    + dest: the copy; its folder must exist
    + group: the group that may read the copy
    + mode: the copy's permissions (0640: root writes, the group reads, others nothing)
    """
    wanted = host.get_fact(Sha256File, path=source)
    if wanted is None:
        host.noop(f"{source} does not exist yet: nothing to copy")
        return
    current = host.get_fact(File, path=dest)
    same = (bool(current) and host.get_fact(Sha256File, path=dest) == wanted and current.get("user") == "root"
            and current.get("group") == group and int(str(current.get("mode")), 8) == int(mode, 8))
    if same:
        host.noop(f"{dest} is up to date")
        return
    yield StringCommand("install", "-m", mode, "-o", "root", "-g", group, QuoteString(source), QuoteString(dest))
