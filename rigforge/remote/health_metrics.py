"""Write the rig's health as Prometheus metrics into node_exporter's textfile directory, atomically.

Standard library only; run on the rig by ``rigforge-health-metrics.timer`` every ``monitoring.interval_s``:

    python3 /opt/rigforge/lib/monitoring/health_metrics.py /etc/rigforge/monitoring/collector.json

Each run costs one ``nvidia-smi`` query (``gpu_health``), one journal read (the entries since the last run's
cursor: the kernel log, the engine's unit and the bench's failure lines, matched against the known-failure
signatures by the project's own matcher, installed beside this file), one ``systemctl show`` and one request to
the engine's health endpoint. The file is written beside its final name and renamed over it, so node_exporter
never serves half a file. What the run itself cost in CPU is written too (``rigforge_health_metrics_cpu_*``).
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

try:  # the repository (tests); on the rig the module lies beside this file
    from rigforge.remote import gpu_health
except ImportError:  # pragma: no cover - the rig's layout
    import gpu_health  # type: ignore[no-redef]

Sample = gpu_health.Sample
KERNEL_IDENT = "kernel"
#: What each metric is, for its ``# HELP`` line; its ``# TYPE`` is ``counter`` when the name ends in _total.
HELP = {
    "rigforge_health_metrics_last_run_timestamp_seconds": "When this file was written (unix seconds).",
    "rigforge_health_metrics_interval_seconds": "Seconds between two writes (monitoring.interval_s).",
    "rigforge_health_metrics_cpu_seconds": "CPU seconds (user + system) the last write took, nvidia-smi included.",
    "rigforge_health_metrics_cpu_seconds_total": "CPU seconds every write since the rig booted took.",
    "rigforge_health_metrics_writes_total": "Writes since the rig booted.",
    "rigforge_gpus_expected": "GPUs the profile expects (0: a CPU-only rig).",
    "rigforge_gpus_found": "GPUs nvidia-smi lists (0 where it does not run).",
    "rigforge_nvidia_smi_present": "1 when nvidia-smi is installed.",
    "rigforge_nvidia_smi_ok": "1 when the nvidia-smi query answered.",
    "rigforge_gpu_info": "One series per GPU: its name, UUID and PCI bus id.",
    "rigforge_gpu_model_as_expected": "1 when the GPU's name holds the profile's gpus.model.",
    "rigforge_gpu_pcie_link_gen_current": "PCIe generation the link runs at now (an idle GPU trains down).",
    "rigforge_gpu_pcie_link_gen_max": "Highest PCIe generation card and slot agree on (wiring, risers).",
    "rigforge_gpu_pcie_link_gen_expected": "The profile's gpus.pcie_gen.",
    "rigforge_gpu_pcie_link_width_current": "PCIe lanes the link runs at now.",
    "rigforge_gpu_pcie_link_width_max": "Most PCIe lanes card and slot agree on.",
    "rigforge_gpu_pcie_link_width_expected": "The profile's gpus.pcie_width.",
    "rigforge_gpu_power_limit_watts": "The GPU's power limit.",
    "rigforge_gpu_power_limit_expected_watts": "The profile's gpus.power_limit_w.",
    "rigforge_gpu_power_draw_watts": "The GPU's power draw.",
    "rigforge_gpu_temperature_celsius": "The GPU's core temperature.",
    "rigforge_gpu_persistence_mode": "1 when persistence mode is on.",
    "rigforge_gpu_persistence_mode_expected": "The profile's gpus.persistence_mode.",
    "rigforge_gpu_ecc_uncorrected_volatile_errors": "Uncorrected ECC errors since the driver loaded (where reported).",
    "rigforge_gpu_retired_pages_pending": "1 when a page retirement waits for a reboot (where reported).",
    "rigforge_nvidia_driver_present": "1 when an NVIDIA kernel module or user-space driver is installed.",
    "rigforge_nvidia_driver_info": "The loaded kernel module's and the installed user-space driver's versions.",
    "rigforge_driver_reboot_pending": "1 when the user-space driver is not the loaded module (reboot pending).",
    "rigforge_known_failure_lines_total": "Log lines of each known failure since boot (kernel, engine, bench).",
    "rigforge_known_failure_new_lines": "Log lines of each known failure written since the previous write.",
    "rigforge_engine_unit_active": "1 when the engine's systemd unit is active.",
    "rigforge_engine_up": "1 when the engine's unit is active and its health endpoint answers 200.",
    "rigforge_engine_restarts_total": "Automatic restarts systemd made of the engine's unit (NRestarts).",
    "rigforge_engine_started_timestamp_seconds": "When the engine's unit last became active (unix seconds).",
    "rigforge_engine_health_timeout_seconds": "Seconds a start may take to answer healthy (engine.health_timeout_s).",
    "rigforge_bench_present": "1 when the rig holds a smoke bench result.",
    "rigforge_bench_timestamp_seconds": "When the last smoke bench finished (unix seconds).",
    "rigforge_bench_primary_value": "The last smoke bench's primary metric (bench.primary), its cell's median.",
    "rigforge_bench_primary_floor": "The profile's floor for that metric and cell.",
    "rigforge_disk_avail_bytes": "Bytes free to unprivileged users on the filesystem of the path.",
    "rigforge_disk_size_bytes": "Size of the filesystem of the path.",
}


def escape(value: str) -> str:
    """A label value in the exposition format (backslash, double quote and newline escaped)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(samples: Iterable[Sample]) -> str:
    """The text format: each metric's HELP and TYPE once, then its samples, metrics in first-seen order.

    >>> print(exposition([("rigforge_gpus_found", {}, 0.0)]), end="")
    # HELP rigforge_gpus_found GPUs nvidia-smi lists (0 where it does not run).
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
        state = {"boot_id": boot_id, "cursor": None, "lines": {}, "cpu_seconds": 0.0, "writes": 0}
    return state


def journal_argv(unit: str, bench_ident: str, cursor: str | None) -> list[str]:
    """One journalctl read: this boot's kernel, engine-unit and bench entries after the cursor, as JSON."""
    argv = ["journalctl", "-b", "--no-pager", "-q", "-o", "json", "--output-fields=MESSAGE,SYSLOG_IDENTIFIER"]
    if cursor:
        argv.append(f"--after-cursor={cursor}")
    return [*argv, f"_SYSTEMD_UNIT={unit}", "+", f"SYSLOG_IDENTIFIER={KERNEL_IDENT}", "+",
            f"SYSLOG_IDENTIFIER={bench_ident}"]


def parse_journal(text: str, bench_ident: str) -> tuple[dict[str, list[str]], str | None]:
    """journalctl's JSON lines -> lines per log (kernel, engine, bench) and the last entry's cursor."""
    logs: dict[str, list[str]] = {"kernel": [], "engine": [], "bench": []}
    cursor = None
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        cursor = entry.get("__CURSOR", cursor)
        message = entry.get("MESSAGE")
        if isinstance(message, list):  # journald sends a message that is not UTF-8 as its bytes
            message = bytes(message).decode("utf-8", "replace")
        if not isinstance(message, str):
            continue
        ident = entry.get("SYSLOG_IDENTIFIER")
        where = "kernel" if ident == KERNEL_IDENT else "bench" if ident == bench_ident else "engine"
        logs[where].append(message)
    return logs, cursor


def count_known_failures(matcher: Any, signatures: Sequence[Mapping[str, Any]],
                         logs: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Lines of each signature in the logs; an engine line counts once though engine and startup show it."""
    counts: dict[str, int] = {}
    for section, places in (("kernel", ("kernel",)), ("engine", ("engine", "startup")), ("bench", ("bench",))):
        seen: set[str] = set()
        for place in places:
            for hit in matcher.match_lines(signatures, list(logs.get(section, ())), place):
                if hit.id not in seen:
                    seen.add(hit.id)
                    counts[hit.id] = counts.get(hit.id, 0) + hit.count
    return counts


def known_failure_samples(signatures: Sequence[Mapping[str, Any]], total: Mapping[str, int],
                          new: Mapping[str, int]) -> list[Sample]:
    """Both counts for every signature, 0 included: a series that exists before its first line shows the rise."""
    samples: list[Sample] = []
    for name, counts in (("rigforge_known_failure_lines_total", total), ("rigforge_known_failure_new_lines", new)):
        samples += [(name, {"id": sig["id"], "failure_severity": sig["severity"]}, float(counts.get(sig["id"], 0)))
                    for sig in signatures]
    return samples


def engine_samples(unit: str, health_url: str, health_timeout_s: float) -> list[Sample]:
    """The unit's state, its automatic restarts and start time, whether its health endpoint answers, and how long
    a start may take to answer (the profile's)."""
    show = subprocess.run(["systemctl", "show", "--timestamp=unix", "-p", "ActiveState", "-p", "NRestarts",
                           "-p", "ActiveEnterTimestamp", unit], capture_output=True, text=True, check=False)
    props = dict(line.split("=", 1) for line in show.stdout.splitlines() if "=" in line)
    active = props.get("ActiveState") == "active"
    healthy = False
    if active:
        try:
            with urllib.request.urlopen(health_url, timeout=5) as answer:  # noqa: S310 - the rig's own engine
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
    return samples


def disk_samples(paths: Mapping[str, str]) -> list[Sample]:
    """Free and total bytes of the filesystem holding each path (its nearest existing parent)."""
    samples: list[Sample] = []
    for use, path in paths.items():
        existing = path
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        stat = os.statvfs(existing)
        labels = {"use": use, "path": path}
        samples += [("rigforge_disk_avail_bytes", labels, float(stat.f_bavail * stat.f_frsize)),
                    ("rigforge_disk_size_bytes", labels, float(stat.f_blocks * stat.f_frsize))]
    return samples


def collect(config: Mapping[str, Any], state: dict[str, Any]) -> list[Sample]:
    """Every sample but the run's own cost; updates ``state`` (cursor, counts since boot)."""
    query = gpu_health.run_query()
    samples = [*gpu_health.gpu_samples(config["gpus"], query), *gpu_health.driver_samples(query[1])]
    sys.path.insert(0, config["matcher_dir"])
    matcher = importlib.import_module(config["matcher_module"])
    read = subprocess.run(journal_argv(config["engine"]["unit"], config["bench_ident"], state["cursor"]),
                          capture_output=True, text=True, errors="replace", check=False)
    logs, cursor = parse_journal(read.stdout, config["bench_ident"])
    new = count_known_failures(matcher, config["signatures"], logs)
    state["cursor"] = cursor or state["cursor"]
    for signature_id, count in new.items():
        state["lines"][signature_id] = state["lines"].get(signature_id, 0) + count
    samples += known_failure_samples(config["signatures"], state["lines"], new)
    engine = config["engine"]
    samples += engine_samples(engine["unit"], engine["health_url"], engine["health_timeout_s"])
    samples += bench_samples(config["bench"])
    samples += disk_samples(config["disks"])
    return samples


def main(argv: Sequence[str]) -> int:
    """Collect, write the textfile, then the state; exit 0 (a broken part shows as its metric)."""
    with open(argv[0], encoding="utf-8") as handle:
        config = json.load(handle)
    with open("/proc/sys/kernel/random/boot_id", encoding="utf-8") as handle:
        state = read_state(config["state"], handle.read().strip())
    samples = collect(config, state)
    used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu = sum(usage.ru_utime + usage.ru_stime for usage in used)
    state["cpu_seconds"] = state.get("cpu_seconds", 0.0) + cpu
    state["writes"] = state.get("writes", 0) + 1
    samples += [("rigforge_health_metrics_last_run_timestamp_seconds", {}, time.time()),
                ("rigforge_health_metrics_interval_seconds", {}, float(config["interval_s"])),
                ("rigforge_health_metrics_cpu_seconds", {}, cpu),
                ("rigforge_health_metrics_cpu_seconds_total", {}, state["cpu_seconds"]),
                ("rigforge_health_metrics_writes_total", {}, float(state["writes"]))]
    write_atomically(config["textfile"], exposition(samples))
    os.makedirs(os.path.dirname(config["state"]), exist_ok=True)
    write_atomically(config["state"], json.dumps(state))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
