"""The known failures of every rig of an inventory, from their logs, as one table. Read-only.

    python -m rigforge.doctor inventory/rig2x.py                 # kernel log since boot, engine since its start
    python -m rigforge.doctor inventory/rig2x.py --since -2h     # the logs over a window (journalctl --since)
    python -m rigforge.doctor inventory/rig2x.py --limit rig2x-a

It runs ``pyinfra -y INVENTORY deploys/doctor.py`` (the inventory's own connections: host-key checks,
sudo, sandbox hosts alike), which reads each rig's kernel log, engine journal and the smoke bench's failure
lines (in the journal as ``rigforge-bench``) with one command, and its driver versions (a reboot pending after
a driver update is a ``driver`` row), and takes no lock. Each rig gets its rows (or
``none``, only when no log holds a line at error level: error lines no signature recognises are an
``unrecognised-error-lines`` row of their own); exit 1 when a rig shows a failure (fail or blocking), unrecognised
error lines, or could not be read, 0 when all are clean or show only warnings.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from rigforge.facts.logs import SINCE
from rigforge.updates.rollout import inventory_hosts

DEPLOY = "deploys/doctor.py"
#: roles/doctor.py prints one line per host starting with this.
MARK = "rigforge-doctor"
HEADER = "| rig | log | known failure | severity | lines | first line | fix |"


def doctor_command(inventory: Path, since: str | None, limit: list[str]) -> list[str]:
    """The pyinfra command line the doctor runs.

    + inventory: the inventory file
    + since: journalctl ``--since`` window, None for since boot / since the engine's last start
    + limit: only these hosts (empty: all)

    Example: ``doctor_command(Path("inventory/rig2x.py"), "-2h", [])``
    """
    command = [sys.executable, "-m", "pyinfra", "-y", str(inventory), DEPLOY]
    for name in limit:
        command += ["--limit", name]
    if since:
        command += ["--data", f"since={since}"]
    return command


def host_name(inventory_name: str) -> str:
    """The name pyinfra gives a host: ``@rigforge/rig2x-a`` (routed through a connector) is ``rig2x-a``; a
    connector's own host (``@local``, the machine pyinfra runs on) keeps its name.

    >>> host_name("@rigforge/rig2x-a"), host_name("sandbox-1"), host_name("@local")
    ('rig2x-a', 'sandbox-1', '@local')
    """
    _, slash, name = inventory_name.partition("/")
    return name if inventory_name.startswith("@") and slash else inventory_name


def parse_records(stdout: str) -> dict[str, dict[str, Any]]:
    """host -> its record, from the ``rigforge-doctor {json}`` lines among pyinfra's output."""
    records = {}
    for line in stdout.splitlines():
        if line.startswith(f"{MARK} "):
            record = json.loads(line[len(MARK) + 1:])
            records[record["host"]] = record
    return records


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table_rows(hosts: list[str], records: dict[str, dict[str, Any]]) -> list[str]:
    """One Markdown row per hit, ``none`` for a clean rig, ``not read`` for a rig pyinfra did not reach."""
    rows = []
    for name in hosts:
        record = records.get(name)
        if record is None:
            rows.append(f"| {name} | - | not read (see pyinfra's output above) | - | - | - | - |")
            continue
        if not record["hits"]:
            rows.append(f"| {name} | kernel, engine, bench, driver | none | - | - | - | - |")
        for hit in record["hits"]:
            log = {"kernel": "kernel", "bench": "bench", "driver": "driver"}.get(hit["where"], "engine")
            rows.append(f"| {name} | {log} | {hit['id']} | {hit['severity']} | {hit['count']} | "
                        f"`{_cell(hit['line'])}` | {_cell(hit['cause'])}: {_cell(hit['fix'])} |")
    return rows


def render_table(hosts: list[str], records: dict[str, dict[str, Any]]) -> str:
    """The fleet table (Markdown)."""
    return "\n".join([HEADER, "|---|---|---|---|---|---|---|", *table_rows(hosts, records)])


def verdict_status(hosts: list[str], records: dict[str, dict[str, Any]]) -> int:
    """1 when a rig was not read or shows a fail, blocking or unrecognised hit, else 0."""
    for name in hosts:
        record = records.get(name)
        if record is None or any(hit["severity"] != "warn" for hit in record["hits"]):
            return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rigforge.doctor", description=__doc__.splitlines()[0])
    parser.add_argument("inventory", type=Path, help="pyinfra inventory file (e.g. inventory/rig2x.py)")
    parser.add_argument("--since", default=None,
                        help="journalctl --since window for every log (-2h, '2026-11-24 03:00'); default: kernel "
                             "log since boot, engine journal and bench lines since the engine's last start")
    parser.add_argument("--limit", action="append", default=[], help="only this rig (repeatable)")
    args = parser.parse_args(argv)
    if not args.inventory.is_file():
        parser.error(f"{args.inventory}: no such inventory file")
    if args.since is not None and not SINCE.match(args.since):
        parser.error(f"--since {args.since!r}: expected a journalctl time such as -2h or '2026-11-24 03:00'")
    names = [host_name(name) for name, _ in inventory_hosts(args.inventory)]
    hosts = [name for name in names if not args.limit or name in args.limit]
    run = subprocess.run(doctor_command(args.inventory, args.since, args.limit), capture_output=True, text=True,
                         check=False)
    records = parse_records(run.stdout)
    if run.returncode != 0 or set(hosts) - set(records):
        sys.stderr.write(run.stderr[-6000:])  # pyinfra's own words on what it could not reach
    window = (f"since {args.since}" if args.since
              else "kernel log since boot, engine journal and bench lines since the engine's last start")
    print(f"rigforge doctor: {args.inventory} ({window})", flush=True)
    print(render_table(hosts, records), flush=True)
    return verdict_status(hosts, records)


if __name__ == "__main__":
    sys.exit(main())
