"""Roll a driver update through a fleet, N rigs at a time, stopping at the first rig that fails.

    python -m rigforge.updates.rollout inventory/rig2x.py                    # one rig at a time
    python -m rigforge.updates.rollout inventory/rig2x.py --batch 2          # two at a time
    python -m rigforge.updates.rollout inventory/rig2x.py --data on_regression=rollback

pyinfra runs a deploy on all its hosts operation by operation (``--serial`` too: one operation on each
host in turn), so it has no "whole deploy on these rigs, then the next ones". This controller runs
``pyinfra -y INVENTORY deploys/driver_update.py --limit <batch>`` per batch, in inventory order. A batch
fails when pyinfra exits non-zero (a verify, a bench or a comparison failed: the deploy says which) or a
host's update record (``rigforge.updates.record``) says ``regression`` or ``cannot tell`` (the comparison could
not resolve the tolerance: no pass; ``--data on_cannot_tell=continue`` lets it go on, the table still says it,
with the resolution); the rollout then stops, the rigs after it are not touched, and the table says so. It ends
with one table for the fleet.

Each batch is its steps in order (``rollout``): run the deploy on the batch, read its records, stop or go on; a
fleet-level step before or after a batch (a gateway told to drain it) belongs between them.

A rig already on its target plans nothing, so a second rollout changes nothing and reboots nothing.
"""

from __future__ import annotations

import argparse
import os
import runpy
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rigforge.bench_runs.plan import results_root, run_stamp
from rigforge.updates.record import UpdateRecord, records_since

DEPLOY = "deploys/driver_update.py"


@dataclass(frozen=True)
class FleetRow:
    """One rig's line in the fleet table."""

    host: str
    driver: str
    decode: str
    change: str
    verdict: str


def inventory_hosts(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(name, data) of every host in a pyinfra inventory file, in file order (each name once)."""
    namespace = runpy.run_path(str(path))
    hosts: dict[str, dict[str, Any]] = {}
    for name, value in namespace.items():
        if name.startswith("_") or not isinstance(value, list):
            continue
        for entry in value:
            if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str):
                hosts.setdefault(entry[0], dict(entry[1]))
            elif isinstance(entry, str):
                hosts.setdefault(entry, {})
    return list(hosts.items())


def target_driver(data: dict[str, Any]) -> str:
    driver = (data.get("rigforge_profile") or {}).get("driver") or {}
    return str(driver.get("version") or "none")


def batches(names: list[str], size: int) -> list[list[str]]:
    return [names[index:index + size] for index in range(0, len(names), size)]


def row_for(host: str, records: list[UpdateRecord], target: str, failed: bool) -> FleetRow:
    """The table row of a rig this rollout reached."""
    if not records:
        if failed:
            return FleetRow(host, f"? → {target}", "n/a", "n/a", "FAILED before the comparison (see above)")
        return FleetRow(host, f"{target} (unchanged)", "n/a", "n/a", "up to date")
    update = next((record for record in records if not record.rollback), records[0])
    rollback = next((record for record in records if record.rollback), None)
    change = f"{update.change_pct:+.1f} %" if update.change_pct is not None else "n/a"
    verdict = update.verdict + (f"; rolled back to {rollback.driver_after}" if rollback else "")
    if update.undecided:
        verdict += (" at this resolution, went on (on_cannot_tell=continue)" if update.went_on else
                    " at this resolution: stopped") + f"; {update.resolution.removeprefix('resolution: ')}"
    return FleetRow(host, f"{update.driver_before} → {update.driver_after}",
                    f"{_tps(update.decode_before)} → {_tps(update.decode_after)}", change, verdict)


def _tps(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "n/a"


def render_table(rows: list[FleetRow]) -> str:
    """The fleet table (Markdown): host, driver before → after, decode tok/s per user at C=1, change, verdict."""
    lines = ["| host | driver | decode tok/s (C=1) | change | verdict |", "|---|---|---|---|---|"]
    lines += [f"| {r.host} | {r.driver} | {r.decode} | {r.change} | {r.verdict} |" for r in rows]
    return "\n".join(lines)


def run_batch(inventory: Path, deploy: str, names: list[str], data: list[str]) -> int:
    """Run the deploy on ``names`` with pyinfra (its output streams through); return its exit status."""
    command = [sys.executable, "-m", "pyinfra", "-y", str(inventory), deploy]
    for name in names:
        command += ["--limit", name]
    for item in data:
        command += ["--data", item]
    print(f"rollout: {' '.join(names)}: {deploy}", flush=True)
    return subprocess.run(command, check=False).returncode


def rollout(inventory: Path, batch: int, data: list[str], deploy: str = DEPLOY) -> tuple[list[FleetRow], bool]:
    """Roll ``deploy`` through the inventory; return the table's rows and whether every batch passed."""
    hosts = inventory_hosts(inventory)
    if not hosts:
        raise SystemExit(f"rollout: {inventory}: no hosts")
    targets = dict(hosts)
    root = results_root()
    rows: list[FleetRow] = []
    names = [name for name, _ in hosts]
    for index, group in enumerate(batches(names, batch)):
        started = run_stamp(datetime.now(timezone.utc))
        status = run_batch(inventory, deploy, group, data)
        records = {name: records_since(root, name, started) for name in group}
        group_rows = [row_for(name, records[name], target_driver(targets[name]), status != 0) for name in group]
        rows += group_rows
        stopped = [row.host for row in group_rows if "FAILED" in row.verdict
                   or any(record.stops for record in records[row.host] if not record.rollback)]
        if status != 0 or stopped:
            rest = [name for later in batches(names, batch)[index + 1:] for name in later]
            at = ", ".join(stopped or group)
            rows += [FleetRow(name, f"{target_driver(targets[name])} not applied", "n/a", "n/a",
                              f"untouched (stopped at {at})") for name in rest]
            print(f"rollout STOPPED at {at} (pyinfra exit {status}); untouched: {', '.join(rest) or 'none'}",
                  flush=True)
            return rows, False
    return rows, True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rigforge.updates.rollout", description=__doc__.splitlines()[0])
    parser.add_argument("inventory", type=Path, help="pyinfra inventory file (e.g. inventory/rig2x.py)")
    parser.add_argument("--batch", type=int, default=1, help="rigs updated at a time (default 1)")
    parser.add_argument("--data", action="append", default=[], metavar="KEY=VALUE",
                        help="passed to pyinfra, e.g. on_regression=rollback")
    parser.add_argument("--deploy", default=DEPLOY, help=f"the per-rig deploy (default {DEPLOY})")
    args = parser.parse_args(argv)
    if args.batch < 1:
        parser.error(f"--batch {args.batch}: expected 1 or more rigs at a time")
    if not args.inventory.is_file():
        parser.error(f"{args.inventory}: no such inventory file")
    started = run_stamp(datetime.now(timezone.utc))
    rows, passed = rollout(args.inventory, args.batch, args.data, args.deploy)
    table = render_table(rows)
    kept = keep_table(results_root(), started, table)
    print("\n" + table, flush=True)
    print(f"rollout {'done' if passed else 'STOPPED'}: {len(rows)} rigs; table in {kept}", flush=True)
    return 0 if passed else 1


def keep_table(root: Path, stamp: str, table: str) -> Path:
    """The fleet table, kept as ``<root>/rollouts/<stamp>.md`` (written whole, then renamed)."""
    path = root / "rollouts" / f"{stamp}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".md.new")
    temporary.write_text(table + "\n")
    os.replace(temporary, path)
    return path


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
