"""Write the rig's health as Prometheus metrics into node_exporter's textfile directory, atomically.

Standard library only; run on the rig by ``rigforge-health-metrics.service`` (its timer) every
``monitoring.interval_s``:

    python3 /opt/rigforge/lib/monitoring/health_metrics.py /etc/rigforge/monitoring/collector.json

A run is six parts, each in a thread of its own with its own time bound (``bounded.run_parts``), so a hung
``nvidia-smi`` (a wedged GPU) cannot hold back the journal read that counts the Xid explaining it, nor the engine
check: ``gpu`` (one ``nvidia-smi`` query), ``journal`` (the entries since the last run's cursor: the kernel log,
the engine's unit and the bench's failure lines, matched against the known-failure signatures by the project's
own matcher, installed beside this file, and every Xid counted per GPU), ``engine`` (``systemctl show`` and the
health endpoint), ``bench``, ``disks`` and ``pcie`` (replay and AER counters). Each part's outcome and time are
series of their own (``rigforge_health_metrics_part_*{part}``). The file is written beside its final name and
renamed over it, so node_exporter never serves half a file; what the run cost in CPU is counted too.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

try:  # the repository (tests); on the rig the modules lie beside this file
    from rigforge.remote import gpu_errors, gpu_health
    from rigforge.remote.bounded import PartCut, PartResult, run_bounded, run_parts
    from rigforge.remote.journal_health import known_failure_samples, read_journal
    from rigforge.remote.metric_help import HELP
except ImportError:  # pragma: no cover - the rig's layout
    import gpu_errors  # type: ignore[no-redef]
    import gpu_health  # type: ignore[no-redef]
    from bounded import PartCut, PartResult, run_bounded, run_parts  # type: ignore[no-redef]
    from journal_health import known_failure_samples, read_journal  # type: ignore[no-redef]
    from metric_help import HELP  # type: ignore[no-redef]

Sample = gpu_health.Sample
#: Seconds each part may take (the config's ``timeouts_s`` may say otherwise); the unit's start timeout covers the
#: longest and Python's own start (rigforge.monitoring.collector.START_TIMEOUT_S).
PART_TIMEOUTS_S = {"gpu": 20.0, "journal": 20.0, "engine": 10.0, "bench": 5.0, "disks": 5.0, "pcie": 15.0}
#: The engine's health endpoint and ``systemctl show`` each get this long.
ENGINE_CALL_S = 4.0


def escape(value: str) -> str:
    """A label value in the exposition format (backslash, double quote and newline escaped)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(samples: Iterable[Sample]) -> str:
    """The text format: each metric's HELP and TYPE once, then its samples, metrics in first-seen order.

    >>> print(exposition([("rigforge_gpus_found", {}, 0.0)]), end="")
    # HELP rigforge_gpus_found GPUs nvidia-smi lists (0 where it does not run or answer).
    # TYPE rigforge_gpus_found gauge
    rigforge_gpus_found 0
    """
    grouped: dict[str, list[Sample]] = {}
    for sample in samples:
        grouped.setdefault(sample[0], []).append(sample)
    lines = []
    for name, group in grouped.items():
        lines += [f"# HELP {name} {HELP[name]}", f"# TYPE {name} {'counter' if name.endswith('_total') else 'gauge'}"]
        for _, labels, value in group:
            text = ",".join(f'{key}="{escape(str(val))}"' for key, val in labels.items())
            lines.append(f"{name}{{{text}}} {value:.15g}" if text else f"{name} {value:.15g}")
    return "\n".join(lines) + "\n"


def write_atomically(path: str, text: str) -> None:
    """Write beside ``path`` and rename over it (node_exporter never reads half a file)."""
    temp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.tmp")
    with open(temp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(temp, 0o644)
    os.replace(temp, path)


def read_state(path: str, boot_id: str) -> dict[str, Any]:
    """The previous run's state on this boot (journal cursor, counts), or a fresh one."""
    try:
        with open(path, encoding="utf-8") as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        state = {}
    if state.get("boot_id") != boot_id:
        state = {"boot_id": boot_id, "cursor": None, "lines": {}, "xids": {}, "replays": None, "cpu_seconds": 0.0,
                 "writes": 0}
    return state


def engine_samples(unit: str, health_url: str, health_timeout_s: float) -> list[Sample]:
    """The unit's state, its automatic restarts and start time, whether its health endpoint answers, and how long
    a start may take to answer (the profile's)."""
    show = run_bounded(["systemctl", "show", "--timestamp=unix", "-p", "ActiveState", "-p", "NRestarts",
                        "-p", "ActiveEnterTimestamp", unit], ENGINE_CALL_S)
    if show is None:
        raise PartCut("systemctl show did not answer")
    props = dict(line.split("=", 1) for line in show.stdout.splitlines() if "=" in line)
    active = props.get("ActiveState") == "active"
    healthy = False
    if active:
        try:
            with urllib.request.urlopen(health_url, timeout=ENGINE_CALL_S) as answer:  # noqa: S310 - the rig's own
                healthy = answer.status == 200
        except OSError:
            healthy = False
    samples: list[Sample] = [("rigforge_engine_unit_active", {}, float(active)),
                             ("rigforge_engine_up", {}, float(healthy)),
                             ("rigforge_engine_health_timeout_seconds", {}, float(health_timeout_s))]
    if props.get("NRestarts", "").isdigit():
        samples.append(("rigforge_engine_restarts_total", {}, float(props["NRestarts"])))
    started = props.get("ActiveEnterTimestamp", "").lstrip("@")
    if started.isdigit():
        samples.append(("rigforge_engine_started_timestamp_seconds", {}, float(started)))
    return samples


def bench_samples(bench: Mapping[str, Any]) -> list[Sample]:
    """The last smoke bench's primary metric (its cell's median, as the floors read it) and its floor."""
    try:
        with open(bench["latest"], encoding="utf-8") as handle:
            result = json.load(handle)
    except (OSError, ValueError):
        return [("rigforge_bench_present", {}, 0.0)]
    labels = {"metric": bench["metric"], "concurrency": str(bench["concurrency"]),
              "input_tokens": str(bench["input_tokens"])}
    samples: list[Sample] = [("rigforge_bench_present", {}, 1.0)]
    try:
        finished = datetime.fromisoformat(str(result.get("finished"))).timestamp()
        samples.append(("rigforge_bench_timestamp_seconds", {}, finished))
    except ValueError:
        pass
    for cell in result.get("cells", []):
        if (cell.get("concurrency"), cell.get("input_tokens")) != (bench["concurrency"], bench["input_tokens"]) \
                or (cell.get("endpoint") or "completions") != "completions":
            continue
        value = (cell.get("metrics") or {}).get(bench["key"]) if cell.get("status") == "ok" else None
        if isinstance(value, dict):
            value = value.get(bench["stat"])
        # A failed cell is a value of 0: it is below any floor, which is what it means.
        samples.append(("rigforge_bench_primary_value", labels, float(value or 0)))
        break
    if bench.get("floor") is not None:
        samples.append(("rigforge_bench_primary_floor", labels, float(bench["floor"])))
    return samples + change_samples(bench.get("change"))


def change_samples(path: str | None) -> list[Sample]:
    """Whether the rig's last measured change could not tell (none measured yet: no sample)."""
    try:
        with open(path or "", encoding="utf-8") as handle:
            change = json.load(handle)
    except (OSError, ValueError):
        return []
    labels = {"change": str(change.get("change", "")), "verdict": str(change.get("verdict", ""))}
    return [("rigforge_measured_change_cannot_tell", labels, 1.0 if change.get("undecided") else 0.0)]


def disk_samples(paths: Mapping[str, str]) -> list[Sample]:
    """The mount point of each path (its nearest existing parent's), for rules joining node_filesystem_*."""
    samples: list[Sample] = []
    for use, path in paths.items():
        mount = path
        while not os.path.ismount(mount):
            mount = os.path.dirname(mount)
        samples.append(("rigforge_disk_info", {"use": use, "path": path, "mountpoint": mount}, 1.0))
    return samples


def pcie_samples(state: Mapping[str, Any], now: float, timeout_s: float) -> tuple[list[Sample], dict[str, Any]]:
    """The pcie part: AER counters every run, replay counters from ``nvidia-smi -q`` every REPLAY_EVERY_S."""
    uuids = gpu_errors.gpu_uuids()
    replays = dict(state.get("replays") or {"at": 0.0, "values": {}})
    aer = gpu_errors.aer_samples(uuids)
    if uuids and now - replays["at"] >= gpu_errors.REPLAY_EVERY_S:
        try:
            done = run_bounded(gpu_errors.replay_argv(), timeout_s)
        except FileNotFoundError:
            done = None
        if done is None or done.returncode not in gpu_health.VALID_OUTPUT_CODES:
            last = gpu_errors.replay_samples(replays["values"], uuids)  # the last counts, as the journal's
            raise PartCut("nvidia-smi -q gave no replay counters", ([*last, *aer], {}), timed_out=done is None)
        replays = {"at": now, "values": gpu_errors.parse_replays(done.stdout)}
    return [*gpu_errors.replay_samples(replays["values"], uuids), *aer], {"replays": replays}


def timeouts(config: Mapping[str, Any]) -> dict[str, float]:
    """Each part's bound: the defaults, and what the config says."""
    return {**PART_TIMEOUTS_S, **config.get("timeouts_s", {})}


def gpu_part(config: Mapping[str, Any]) -> list[Sample]:
    """The gpu part: the query, the driver's versions."""
    query = gpu_health.run_query(timeouts(config)["gpu"] - 1)
    samples = [*gpu_health.gpu_samples(config["gpus"], query), *gpu_health.driver_samples(query.error)]
    if query.output is None and query.error is not None and query.exit_code is None:
        raise PartCut(query.error, samples)  # it did not answer: 0 GPUs found, and the part says why
    return samples


def collect(config: Mapping[str, Any], state: dict[str, Any]) -> list[Sample]:
    """Every sample but the run's own cost, each part within its bound; updates ``state`` from the parts that
    finished (a journal read that did not keeps the cursor, and the last counts are written again)."""
    bounds, engine = timeouts(config), config["engine"]
    parts: dict[str, tuple[Callable[[], Any], float]] = {
        "gpu": (lambda: gpu_part(config), bounds["gpu"]),
        "journal": (lambda: read_journal(config, state, bounds["journal"] - 1), bounds["journal"]),
        "engine": (lambda: engine_samples(engine["unit"], engine["health_url"], engine["health_timeout_s"]),
                   bounds["engine"]),
        "bench": (lambda: bench_samples(config["bench"]), bounds["bench"]),
        "disks": (lambda: disk_samples(config["disks"]), bounds["disks"]),
        "pcie": (lambda: pcie_samples(state, time.time(), bounds["pcie"] - 1), bounds["pcie"]),
    }
    results = run_parts(parts)
    journal, pcie = results.pop("journal"), results.pop("pcie")
    if journal.error is None:
        state.update(journal.value)
    # A GPU's UUID stays on its Xid series after the driver lets go of the GPU (fallen off the bus): kept per boot.
    state["uuids"] = {**state.get("uuids", {}), **gpu_errors.gpu_uuids()}
    samples: list[Sample] = [*known_failure_samples(config["signatures"], state["lines"]),
                             *gpu_errors.xid_samples(state.get("xids", {}), state["uuids"]),
                             *unrecognised_samples(state.get("unrecognised", {}))]
    if pcie.value is not None:
        samples += pcie.value[0]
        state.update(pcie.value[1])
    for result in results.values():
        samples += result.value or []
    return [*samples, *part_samples({**results, "journal": journal, "pcie": pcie})]


def unrecognised_samples(total: Mapping[str, int]) -> list[Sample]:
    """Error lines no signature knows, by log, since boot (the matcher's ``unrecognised_counts``, summed)."""
    return [("rigforge_unrecognised_error_lines_total", {"log": log}, float(count))
            for log, count in sorted(total.items())]


def part_samples(results: Mapping[str, PartResult]) -> list[Sample]:
    """Each part's outcome and time."""
    samples: list[Sample] = []
    for name, result in results.items():
        labels = {"part": name}
        samples += [("rigforge_health_metrics_part_ok", labels, float(result.error is None)),
                    ("rigforge_health_metrics_part_timed_out", labels, float(result.timed_out)),
                    ("rigforge_health_metrics_part_duration_seconds", labels, round(result.seconds, 3))]
    return samples


def main(argv: Sequence[str]) -> int:
    """Collect, write the textfile, then the state; exit 0 (a broken part shows as its metric)."""
    with open(argv[0], encoding="utf-8") as handle:
        config = json.load(handle)
    with open("/proc/sys/kernel/random/boot_id", encoding="utf-8") as handle:
        state = read_state(config["state"], handle.read().strip())
    samples = collect(config, state)
    used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    state["cpu_seconds"] = state.get("cpu_seconds", 0.0) + sum(usage.ru_utime + usage.ru_stime for usage in used)
    state["writes"] = state.get("writes", 0) + 1
    samples += [("rigforge_health_metrics_last_run_timestamp_seconds", {}, time.time()),
                ("rigforge_health_metrics_interval_seconds", {}, float(config["interval_s"])),
                ("rigforge_health_metrics_cpu_seconds_total", {}, state["cpu_seconds"]),
                ("rigforge_health_metrics_writes_total", {}, float(state["writes"]))]
    write_atomically(config["textfile"], exposition(samples))
    os.makedirs(os.path.dirname(config["state"]), exist_ok=True)
    write_atomically(config["state"], json.dumps(state))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
