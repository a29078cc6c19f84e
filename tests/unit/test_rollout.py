"""The rollout's pure parts: batches, the fleet table, baseline reuse and the update records."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from rigforge.profile.loader import load_profile
from rigforge.updates.record import (
    UpdateRecord,
    headline_decode,
    profile_workload,
    recent_baseline,
    records_since,
    write_record,
)
from rigforge.updates.rollout import FleetRow, batches, inventory_hosts, render_table, row_for

NOW = datetime(2026, 11, 23, 4, 0, tzinfo=timezone.utc)


def _record(**changes: object) -> UpdateRecord:
    fields: dict = {"host": "rig-a", "started": "20261123T040000Z", "rollback": False, "driver_before": "590.48.01",
                    "driver_after": "595.45.04", "baseline": "b", "after": "a", "decode_before": 60.0,
                    "decode_after": 57.0, "verdict": "within noise", "summary": "within noise: decode"}
    return UpdateRecord(**{**fields, **changes})


def _write_result(root: Path, stamp: str, finished: datetime, driver: str, **config: object) -> Path:
    profile = load_profile("sandbox")
    run = root / "rig-a" / stamp
    run.mkdir(parents=True)
    result = {"status": "ok", "finished": finished.isoformat(), "metadata": {"driver_version": driver},
              "config": {**profile_workload(profile), **config},
              "cells": [{"concurrency": 2, "input_tokens": 128, "metrics": {"decode_tps_per_user": {"median": 40.0}}},
                        {"concurrency": 1, "input_tokens": 128, "metrics": {"decode_tps_per_user": {"median": 61.5}}}]}
    (run / "result.json").write_text(json.dumps(result))
    return run


def test_batches_keep_inventory_order() -> None:
    assert batches(["a", "b", "c"], 1) == [["a"], ["b"], ["c"]]
    assert batches(["a", "b", "c"], 2) == [["a", "b"], ["c"]]


def test_the_fleet_table_names_versions_numbers_and_verdicts() -> None:
    row = row_for("rig-a", [_record()], "595.45.04", failed=False)
    assert row == FleetRow("rig-a", "590.48.01 → 595.45.04", "60.0 → 57.0", "-5.0 %", "within noise")
    rolled = row_for("rig-b", [_record(verdict="regression"), _record(rollback=True, driver_after="590.48.01")],
                     "595.45.04", failed=True)
    assert rolled.verdict == "regression; rolled back to 590.48.01"
    assert row_for("rig-c", [], "595.45.04", failed=False).verdict == "up to date"
    assert render_table([row]).splitlines() == [
        "| host | driver | decode tok/s (C=1) | change | verdict |", "|---|---|---|---|---|",
        "| rig-a | 590.48.01 → 595.45.04 | 60.0 → 57.0 | -5.0 % | within noise |"]


def test_a_recent_result_of_the_same_workload_on_the_installed_driver_is_the_baseline(tmp_path: Path) -> None:
    profile = load_profile("sandbox")
    old = _write_result(tmp_path, "20261123T033000Z", NOW - timedelta(minutes=30), "590.48.01")
    assert recent_baseline(tmp_path, "rig-a", profile, "590.48.01", now=NOW) == old
    assert recent_baseline(tmp_path, "rig-a", profile, "595.45.04", now=NOW) is None  # another driver
    assert recent_baseline(tmp_path, "rig-a", profile, "590.48.01", now=NOW + timedelta(hours=2)) is None  # stale
    _write_result(tmp_path, "20261123T035000Z", NOW - timedelta(minutes=10), "590.48.01", output_tokens=7)
    assert recent_baseline(tmp_path, "rig-a", profile, "590.48.01", now=NOW) == old  # other workload skipped


def test_the_headline_number_is_the_lowest_concurrency_cell(tmp_path: Path) -> None:
    run = _write_result(tmp_path, "20261123T033000Z", NOW, "590.48.01")
    assert headline_decode(json.loads((run / "result.json").read_text())) == 61.5


def test_records_are_written_whole_and_read_back_in_order(tmp_path: Path) -> None:
    write_record(tmp_path, _record())
    write_record(tmp_path, _record(rollback=True, started="20261123T041000Z"))
    assert [r.rollback for r in records_since(tmp_path, "rig-a", "20261123T040000Z")] == [False, True]
    assert records_since(tmp_path, "rig-a", "20261123T041000Z")[0].rollback
    assert not list((tmp_path / "rig-a" / "updates").glob("*.new"))


def test_inventory_hosts_reads_every_list_once_in_order(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.py"
    inventory.write_text("rigs = [('a', {'x': 1}), ('b', {})]\nmore = ['c', 'a']\n")
    assert [name for name, _ in inventory_hosts(inventory)] == ["a", "b", "c"]


