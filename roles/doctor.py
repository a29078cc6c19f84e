"""Doctor role: the known failures of this host's logs, read only, handed to ``python -m rigforge.doctor``.

The host's kernel log and engine journal are read with one fact (``KnownFailureLogs``: bounded, filtered
on the rig), matched against inventory/known-failures.yaml on the controller, and printed as one JSON
line on stdout (``rigforge-doctor {...}``) that the doctor collects into the fleet table. Beside the logs,
the driver: a user-space driver that is not the loaded module (a reboot pending after a driver update,
rigforge/checks/driver_reboot.py) is a row of its own, whatever the logs say. Nothing runs on the host beyond
those reads: no lock, no file, no operation.
"""

from __future__ import annotations

import json

from pyinfra import host
from pyinfra.api import deploy

from rigforge.checks.driver_reboot import doctor_record, driver_mismatch
from rigforge.checks.known_failures import find_known_failures
from rigforge.doctor import MARK
from rigforge.facts.driver import NvidiaLoadedDriver
from rigforge.facts.logs import KnownFailureLogs
from rigforge.facts.packages import NvidiaSmiVersions
from rigforge.known_failures import Hit


def hit_record(hit: Hit) -> dict[str, object]:
    """What the doctor's table shows of a hit (plain data)."""
    signature = hit.signature
    return {"id": hit.id, "where": hit.where, "severity": hit.severity, "count": hit.count, "line": hit.line,
            "cause": signature["cause"], "fix": hit.fix, "profile_fields": signature["profile_fields"]}


@deploy("Doctor")
def apply_doctor() -> None:
    """Read this host's logs and driver and print its known failures as one ``rigforge-doctor`` JSON line.

    The window is ``--data since=...`` (journalctl's ``--since``: ``-2h``, ``2026-11-24 03:00``); without
    it, the kernel log since boot, the engine journal and the bench lines since the engine's last start.
    """
    since = host.data.get("since")
    logs = host.get_fact(KnownFailureLogs, since=str(since) if since else None)
    hits = [hit_record(hit) for hit in find_known_failures(logs)]
    mismatch = driver_mismatch(host.get_fact(NvidiaLoadedDriver), host.get_fact(NvidiaSmiVersions))
    if mismatch is not None:
        hits.insert(0, doctor_record(mismatch))
    record = {"host": host.name, "since": since, "hits": hits}
    print(f"{MARK} {json.dumps(record, sort_keys=True)}", flush=True)
