"""A driver update's evidence on the controller: which benches were the baseline (k engine starts on the old
driver, k chosen by rigforge/updates/sizing.py), which came after (as many starts on the new one), the comparison
of one value per start a side (``rigforge.updates.comparison``), the verdict and what the starts could resolve,
kept as ``results/<host>/updates/<stamp>.json`` beside the run folders, with ``comparison.md`` and
``comparison.png`` in the last after-bench's folder.

A record keeps the primary's start-to-start spread its starts measured (``spread``): the next measured change on
the rig sizes its k from it (``last_spread``). ``cannot tell`` is no pass: such a record ``stops`` the rollout
unless the owner let it go on (``went_on``, ``--data on_cannot_tell=continue``), and it says the resolution.

The rollout (``python -m rigforge.updates.rollout``) reads these records to build its fleet table.

Example::

    record = judge_update(Path("results"), "rig2x-a", profile, "590.48.01", "595.45.04",
                          "20261123T040000Z", baselines=None, rollback=False, starts=3)
    print("\\n".join(record.report_lines()))
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from rigforge.bench.config import COMPLETIONS, CellKind
from rigforge.bench_runs.starts import judged_profile
from rigforge.profile import Profile
from rigforge.updates.compare_render import render_markdown, render_plot
from rigforge.updates.comparison import CANNOT_TELL, METRICS, WORSE, RegressionPolicy, cell_value, compare
from rigforge.updates.history import find_results, load_result
from rigforge.updates.sizing import Spread, assumed_spread, primary_spread, resolution_words, resolving_starts

UPDATES_DIR = "updates"
#: An engine change's records (roles/engine_update.py): beside the driver's, out of the driver rollout's table.
ENGINE_UPDATES_DIR = "engine-updates"
#: The workload of a bench run: results that differ in any of these are not comparable.
WORKLOAD_KEYS = ("model", "endpoint", "concurrency", "input_tokens", "output_tokens", "cell_seconds",
                 "warmup_requests", "extra_cells")
#: The regression verdict; records written before verdicts were calibrated say "regression".
REGRESSION = WORSE
OLD_REGRESSION = "regression"


@dataclass(frozen=True)
class UpdateRecord:
    """One host's update (or rollback): versions, the two benches, the headline number and the verdict."""

    host: str
    started: str
    rollback: bool
    driver_before: str | None
    driver_after: str
    baseline: str
    after: str
    decode_before: float | None
    decode_after: float | None
    verdict: str
    summary: str
    apart: str = ""  # how far apart the two sides were, and what the comparison cannot see
    baselines: list[str] = field(default_factory=list)  # every start's run folder before (baseline: the first)
    afters: list[str] = field(default_factory=list)  # every start's run folder after (after: the last)
    change: str = "driver"  # what changed: "driver", or "engine" (then driver_before/after name the engine builds)
    spread: float | None = None  # the primary's start-to-start spread the starts measured (sd of log values)
    resolution: str = ""  # what the starts resolved at that spread (rigforge.updates.resolution), and what would
    starts_needed: int | None = None  # starts a side that resolve the primary's tolerance at that spread
    went_on: bool = False  # "cannot tell", and the owner's on_cannot_tell=continue let the rollout go on
    measured: str = ""  # the primary and model the spread is of (``measured_key``): other rigs of a fleet size by it

    @property
    def regressed(self) -> bool:
        return self.verdict in (REGRESSION, OLD_REGRESSION)

    @property
    def undecided(self) -> bool:
        """The comparison could not tell at the tolerance: no pass, whatever the rollout then does."""
        return self.verdict == CANNOT_TELL

    @property
    def stops(self) -> bool:
        """The rollout stops here: a regression, or "cannot tell" the owner did not let go on."""
        return self.regressed or (self.undecided and not self.went_on)

    @property
    def ok(self) -> bool:
        return not self.stops

    @property
    def change_pct(self) -> float | None:
        if not self.decode_before or self.decode_after is None:
            return None
        return 100.0 * (self.decode_after - self.decode_before) / self.decode_before

    def report_lines(self) -> list[str]:
        what = "rollback" if self.rollback else "update"
        change = f"{self.change_pct:+.1f} %" if self.change_pct is not None else "n/a"
        return [f"{self.change} {what} on {self.host}: {self.driver_before} -> {self.driver_after}; decode C=1 "
                f"{_number(self.decode_before)} -> {_number(self.decode_after)} tok/s ({change}); "
                f"verdict: {self.verdict}", self.summary,
                f"before: {', '.join(self.baselines or [self.baseline])}; "
                f"after: {', '.join(self.afters or [self.after])}",
                *([self.apart] if self.apart else []), *([self.resolution] if self.resolution else []),
                *([CANNOT_TELL_WORDS + (" (on_cannot_tell=continue: the rollout goes on)" if self.went_on else "")]
                  if self.undecided else [])]


#: What a "cannot tell" record says beside its resolution.
CANNOT_TELL_WORDS = "cannot tell at this resolution: not a pass; the rollout stops here"


def _number(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "n/a"


def workload(result: dict[str, Any]) -> dict[str, Any]:
    """The comparable part of a result's config (what was measured, not where or when)."""
    config = result.get("config") or {}
    # A result from before extra cells existed measured none.
    return {**{key: config.get(key) for key in WORKLOAD_KEYS}, "extra_cells": config.get("extra_cells") or [],
            "repeats": config.get("repeats", 1)}


def profile_workload(profile: Profile) -> dict[str, Any]:
    """The workload the profile's bench would measure, in the result's terms."""
    bench = profile.bench
    return {"model": profile.engine.served_model_name, "endpoint": "completions",
            "concurrency": list(bench.concurrency), "input_tokens": list(bench.input_tokens),
            "output_tokens": bench.output_tokens, "cell_seconds": float(bench.cell_seconds),
            "warmup_requests": bench.warmup_requests, "repeats": bench.repeats,
            "extra_cells": [cells.model_dump() for cells in bench.extra_cells]}


def finished_at(result: dict[str, Any], key: str = "finished") -> datetime | None:
    try:
        return datetime.fromisoformat(str(result.get(key)))
    except ValueError:
        return None


def apart_line(before: list[dict[str, Any]], after: list[dict[str, Any]], change: str = "driver") -> str:
    """How far apart the two sides were, how many engine starts each measured, and what no start can show: every
    start before ran in one boot and every start after in another, so what changes from boot to boot alone
    (memory and link training, clocks, where the driver placed its buffers) is not measured and would read as the
    driver's.

    >>> apart_line([{"finished": "2026-11-23T04:00:00+00:00"}] * 3, [{"started": "2026-11-23T04:14:30+00:00"}] * 3)[:50]
    '3 engine starts before and 3 after, 14.5 min apart'
    """
    finished, started = finished_at(before[-1]), finished_at(after[0], "started")
    gap = f"{(started - finished).total_seconds() / 60:.1f} min" if finished and started else "an unknown time"
    if change != "driver":  # an engine change needs no reboot: both sides ran in one boot
        return (f"{len(before)} engine start{'s' if len(before) != 1 else ''} before and {len(after)} after, {gap} "
                f"apart, in one boot with the {change} change between: the start-to-start spread is measured on "
                "each side")
    return (f"{len(before)} engine start{'s' if len(before) != 1 else ''} before and {len(after)} after, {gap} apart, "
            "with the driver change and a reboot between: the start-to-start spread is measured on each side, the "
            "boot-to-boot difference is not (one boot a side); a change of that size would read as the driver's")


def recent_baselines(root: Path, host: str, profile: Profile, installed: str | None, starts: int,
                     now: datetime | None = None) -> list[Path] | None:
    """The newest passing results of the profile's workload on ``installed``, one per engine start, ``starts`` of
    them, each younger than ``driver_update.baseline_max_age_minutes``; None when fewer are found (the update
    measures its own). Results that do not name their engine start are not counted; a start that benched only the
    judged cells counts as one of the profile's workload (rigforge/bench_runs/starts.py: judged_profile).
    """
    max_age = timedelta(minutes=profile.driver_update.baseline_max_age_minutes)
    now = now or datetime.now(timezone.utc)
    wanted = (profile_workload(profile), profile_workload(judged_profile(profile)))
    found: dict[str, Path] = {}
    for run in reversed(find_results(root, host)):
        result = load_result(run)
        finished = finished_at(result)
        if finished is None or now - finished > max_age:
            break  # older ones are older still
        metadata = result.get("metadata") or {}
        start = metadata.get("engine_start")
        if (result.get("status") == "ok" and workload(result) in wanted and start and start not in found
                and metadata.get("driver_version") == installed):
            found[start] = run
        if len(found) == starts:
            return sorted(found.values())
    return None


def headline_decode(result: dict[str, Any]) -> float | None:
    """Decode tok/s per user of the lowest-concurrency, shortest-prompt cell, as the comparison reads it
    (median over the cell's repeats): the fleet table's number."""
    cells = [cell for cell in result.get("cells") or [] if cell.get("metrics") and CellKind.of(cell) == COMPLETIONS]
    if not cells:
        return None
    cell = min(cells, key=lambda c: (c["concurrency"], c["input_tokens"]))
    decode = next(metric for metric in METRICS if metric.name == "decode_tps_per_user")
    return cell_value(cell, decode)


def judge_update(root: Path, host: str, profile: Profile, driver_before: str | None, driver_after: str,
                 started: str, baselines: list[Path] | None, rollback: bool, change: str = "driver",
                 starts: int | None = None, went_on: bool = False) -> UpdateRecord:
    """Compare this update's starts, write the comparison and the record, and return the record.

    + root: the controller's results folder
    + started: the update's stamp; the first ``starts`` runs from it on are the baseline (unless ``baselines`` are
      given), the newest as many are the starts after
    + baselines: recent results reused as the baseline, one per engine start
    + change: what changed between the sides ("driver", "engine"); before/after name its versions
    + starts: k, the starts a side (rigforge/updates/sizing.py); None: ``bench.verdicts.starts``
    + went_on: the owner lets a "cannot tell" go on (``on_cannot_tell=continue``)
    """
    starts = starts or profile.bench.verdicts.starts
    runs = [run for run in find_results(root, host) if run.name >= started]
    if len(runs) < starts * (1 if baselines else 2):
        raise RuntimeError(f"{host}: the benches of the update started {started} are missing under {root}")
    before_dirs, after_dirs = list(baselines or runs[:starts]), runs[-starts:]
    before, after = [load_result(run) for run in before_dirs], [load_result(run) for run in after_dirs]
    comparison = compare(before, after, RegressionPolicy.from_profile(profile))
    spread = primary_spread(comparison)
    (after_dirs[-1] / "comparison.md").write_text(render_markdown(comparison))
    render_plot(comparison, after_dirs[-1] / "comparison.png")
    record = UpdateRecord(host=host, started=started, rollback=rollback, driver_before=driver_before,
                          driver_after=driver_after, baseline=str(before_dirs[0]), after=str(after_dirs[-1]),
                          decode_before=over_starts(before), decode_after=over_starts(after),
                          verdict=str(comparison.verdict), summary=comparison.summary(),
                          apart=apart_line(before, after, change), baselines=[str(run) for run in before_dirs],
                          afters=[str(run) for run in after_dirs], change=change, spread=spread,
                          resolution=resolution_words(profile, len(before_dirs), len(after_dirs), spread),
                          starts_needed=resolving_starts(profile, spread) if spread is not None else None,
                          went_on=went_on and str(comparison.verdict) == CANNOT_TELL, measured=measured_key(profile))
    write_record(root, record)
    return record


def measured_key(profile: Profile) -> str:
    """What a record's spread is the spread of: the primary metric in its cell, of the served model.

    >>> from rigforge.profile.loader import load_profile
    >>> measured_key(load_profile("sandbox"))
    'decode_tps_per_user C=1 in=128 of gemma-3-270m'
    """
    primary = profile.bench.primary
    return (f"{primary.metric} C={primary.concurrency} in={primary.input_tokens} of "
            f"{profile.engine.served_model_name}")


def last_spread(root: Path, host: str, profile: Profile) -> Spread:
    """The primary's spread the rig's newest measured change (driver or engine) measured; else the newest any other
    rig under ``root`` measured of the same primary and model (a rollout's earlier rigs); else the profile's
    assumed one."""
    def newest(hosts: list[Path]) -> Spread | None:
        paths = [path for folder in hosts for kind in (UPDATES_DIR, ENGINE_UPDATES_DIR)
                 for path in (folder / kind).glob("*.json")]
        for path in sorted(paths, key=lambda path: path.name, reverse=True):
            record = json.loads(path.read_text())
            if record.get("spread") is not None and record.get("measured") in (key, ""):
                return Spread(float(record["spread"]), f"measured in the {path.parent.parent.name} "
                                                       f"{path.parent.name[:-1]} of {path.stem}")
        return None

    key = measured_key(profile)
    others = [folder for folder in sorted(root.iterdir()) if folder.is_dir() and folder.name != host] \
        if root.is_dir() else []
    return newest([root / host]) or newest(others) or assumed_spread(profile)


def over_starts(results: list[dict[str, Any]]) -> float | None:
    """The headline number over engine starts: the median of each start's."""
    values = [value for value in map(headline_decode, results) if value is not None]
    return statistics.median(values) if values else None


def write_record(root: Path, record: UpdateRecord) -> Path:
    """``<root>/<host>/updates/<started>.json`` (an engine change's: ``engine-updates/``), written to a temporary
    name and renamed."""
    folder = root / record.host / (UPDATES_DIR if record.change == "driver" else ENGINE_UPDATES_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{record.started}{'-rollback' if record.rollback else ''}.json"
    temporary = path.with_suffix(".json.new")
    temporary.write_text(json.dumps(asdict(record), indent=1) + "\n")
    os.replace(temporary, path)
    return path


def records_since(root: Path, host: str, since: str) -> list[UpdateRecord]:
    """The host's update records from ``since`` (a stamp) on, oldest first."""
    folder = root / host / UPDATES_DIR
    paths = sorted(folder.glob("*.json")) if folder.is_dir() else []
    return [UpdateRecord(**json.loads(path.read_text())) for path in paths if path.name >= since]
