"""The rollout's pure parts: batches, the fleet table, baseline reuse and the update records."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from rigforge.profile.loader import load_profile
from rigforge.updates.record import (
    UpdateRecord,
    apart_line,
    headline_decode,
    profile_workload,
    recent_baselines,
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


def _write_result(root: Path, stamp: str, finished: datetime, driver: str, start: str | None = "s1",
                  **config: object) -> Path:
    profile = load_profile("sandbox")
    run = root / "rig-a" / stamp
    run.mkdir(parents=True)
    result = {"status": "ok", "finished": finished.isoformat(),
              "metadata": {"driver_version": driver, "engine_start": start},
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


def test_recent_results_of_as_many_engine_starts_as_the_update_asks_are_the_baseline(tmp_path: Path) -> None:
    profile = load_profile("sandbox")

    def baselines(driver: str = "590.48.01", now: datetime = NOW) -> list[Path] | None:
        return recent_baselines(tmp_path, "rig-a", profile, driver, 3, now=now)

    old = [_write_result(tmp_path, f"20261123T03{minute}00Z", NOW - timedelta(minutes=60 - minute), "590.48.01",
                         start=f"s{minute}") for minute in (30, 31)]
    assert baselines() is None  # two starts: one short
    _write_result(tmp_path, "20261123T033200Z", NOW - timedelta(minutes=28), "590.48.01", start="s31")
    _write_result(tmp_path, "20261123T033300Z", NOW - timedelta(minutes=27), "590.48.01", start=None)
    assert baselines() is None  # the same start twice, and one that does not say which: no third start
    third = _write_result(tmp_path, "20261123T033400Z", NOW - timedelta(minutes=26), "590.48.01", start="s34")
    assert baselines() == [old[0], tmp_path / "rig-a" / "20261123T033200Z", third]  # the newest of each start
    assert baselines("595.45.04") is None  # another driver
    assert baselines(now=NOW + timedelta(hours=2)) is None  # stale
    _write_result(tmp_path, "20261123T035000Z", NOW - timedelta(minutes=10), "590.48.01", start="s50",
                  output_tokens=7)
    assert baselines() == [old[0], tmp_path / "rig-a" / "20261123T033200Z", third]  # other workload skipped


def test_the_update_says_its_starts_and_the_boot_to_boot_difference_it_cannot_measure() -> None:
    line = apart_line([{"finished": "2026-11-23T04:00:00+00:00"}] * 3, [{"started": "2026-11-23T04:14:30+00:00"}] * 3)
    assert line == ("3 engine starts before and 3 after, 14.5 min apart, with the driver change and a reboot "
                    "between: the start-to-start spread is measured on each side, the boot-to-boot difference is not "
                    "(one boot a side); a change of that size would read as the driver's")
    assert "an unknown time apart" in apart_line([{}], [{}])


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


