"""The GPU part of the rig's health metrics: one ``nvidia-smi --query-gpu`` and the driver's two versions.

Standard library only: installed beside ``health_metrics.py`` on the rig (``/opt/rigforge/lib/monitoring``).
Each GPU's values come back next to what the profile expects of them, so an alerting rule compares two series
of the same labels; every per-GPU series carries ``gpu`` (the index, which renumbers when a card drops out),
``uuid`` and ``pci_bus_id`` (sysfs' form, ``0000:41:00.0``, as the kernel's Xid lines and AER files name it).
A value the card does not report (``[N/A]``: retired pages on cards that remap rows, as the H200 and Blackwell
do) is left out, never written as 0. nvidia-smi's exit status is told apart (``EXIT_CODES``): 14, a corrupted
infoROM, still prints every GPU's values. Without nvidia-smi (the CPU-only sandbox) the only GPU series say so:
``rigforge_gpus_found 0`` and ``rigforge_nvidia_smi_present 0``.

    samples = gpu_samples(expected, run_query())
"""

from __future__ import annotations

import glob
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

try:  # the repository (tests); on the rig the module lies beside this file
    from rigforge.remote.bounded import run_bounded
except ImportError:  # pragma: no cover - the rig's layout
    from bounded import run_bounded  # type: ignore[no-redef]

#: One sample: metric name, labels, value.
Sample = tuple[str, dict[str, str], float]

#: The fields of the one query, each a documented ``nvidia-smi --help-query-gpu`` name (driver 580's help,
#: tests/fixtures/monitoring/nvidia-h200-x1-collector/nvidia-smi-help-query-gpu.txt).
QUERY_FIELDS = ("index", "name", "uuid", "pci.bus_id", "driver_version", "persistence_mode", "power.limit",
                "power.draw", "temperature.gpu", "temperature.memory", "temperature.gpu.tlimit",
                "pcie.link.gen.gpucurrent", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
                "clocks.current.sm", "clocks.current.memory", "clocks.max.sm", "clocks.max.memory",
                "utilization.gpu", "utilization.memory", "memory.used", "memory.total",
                "ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total",
                "retired_pages.pending", "remapped_rows.correctable", "remapped_rows.uncorrectable",
                "remapped_rows.pending", "remapped_rows.failure",
                *(f"clocks_event_reasons.{reason}" for reason in (
                    "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "hw_thermal_slowdown",
                    "hw_power_brake_slowdown", "sw_thermal_slowdown", "sync_boost")),
                *(f"clocks_event_reasons_counters.{reason}" for reason in (
                    "sw_power_cap", "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown",
                    "hw_power_brake_slowdown")))
NVIDIA_SMI = "nvidia-smi"
#: nvidia-smi's documented return values (``man nvidia-smi``, RETURN VALUE).
EXIT_CODES = {0: "success", 2: "an argument or flag is invalid", 3: "not available on the target device",
              4: "no permission", 6: "a query to find an object was unsuccessful",
              8: "a GPU's external power cables are not attached", 9: "the NVIDIA driver is not loaded",
              10: "the kernel detected an interrupt issue with a GPU", 12: "the NVML library could not be loaded",
              13: "the local NVML does not implement a function", 14: "the infoROM is corrupted",
              15: "a GPU has fallen off the bus or is otherwise inaccessible", 255: "other or internal driver error"}
#: Exit statuses whose output is every GPU's values all the same: 14 warns of a corrupted infoROM.
VALID_OUTPUT_CODES = (0, 14)
#: How nvidia-smi refuses a field this driver does not know (exit 2); the query is asked again without it.
_REFUSED = re.compile(r'Field "([^"]+)" is not a valid field to query')
#: The loaded kernel module's version, and the user-space library whose file name carries the installed one.
MODULE_VERSION = "/sys/module/nvidia/version"
NVML_LIBRARIES = "/usr/lib/*/libnvidia-ml.so.*.*"
#: What nvidia-smi prints where a card cannot give a value.
UNAVAILABLE = ("n/a", "not supported", "unknown error")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_VERSION = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$")
_BUS_ID = re.compile(r"^(?:PCI:)?([0-9A-Fa-f]+):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.([0-7]))?$")


class Query(NamedTuple):
    """One run of the query: its CSV (None when there is none), its message, exit status and refused fields."""

    output: str | None
    error: str | None
    exit_code: int | None = None
    refused: tuple[str, ...] = ()


def query_argv(fields: Sequence[str] = QUERY_FIELDS) -> list[str]:
    """The one nvidia-smi query (with its header row, so the parser maps columns by name)."""
    return [NVIDIA_SMI, f"--query-gpu={','.join(fields)}", "--format=csv"]


def run_query(timeout_s: float = 20) -> Query:
    """Run the query within ``timeout_s`` all told, dropping any field this driver refuses.

    ``Query(None, None)`` without nvidia-smi; ``output`` None when it did not answer in time or printed no table.
    """
    deadline = time.monotonic() + timeout_s
    fields, refused = list(QUERY_FIELDS), []
    while True:
        try:
            done = run_bounded(query_argv(fields), deadline - time.monotonic())
        except FileNotFoundError:
            return Query(None, None)
        if done is None:
            return Query(None, f"nvidia-smi did not answer within {timeout_s:g} s", None, tuple(refused))
        unknown = [field for field in _REFUSED.findall(done.stdout + done.stderr) if field in fields]
        if done.returncode == 2 and unknown and len(unknown) < len(fields) - 1:
            refused += unknown
            fields = [field for field in fields if field not in unknown]
            continue
        table = done.stdout if done.stdout.lstrip().startswith("index") else None
        lines = (done.stderr + done.stdout).strip().splitlines()
        message = None if done.returncode == 0 else (
            f"nvidia-smi exited {done.returncode} ({EXIT_CODES.get(done.returncode, 'undocumented')})"
            + (f": {lines[-1]}" if lines and table is None else ""))
        return Query(table, message, done.returncode, tuple(refused))


def parse_query_csv(text: str) -> list[dict[str, str | None]]:
    """``--format=csv`` output -> one mapping per GPU, keyed by field name (units in the header dropped).

    A value nvidia-smi cannot give (``[N/A]``, ``N/A``, ``[Not Supported]``) is None. A line that is not a row of
    the table (a GPU nvidia-smi could not read says so in a sentence) is skipped.

    >>> parse_query_csv("index, power.limit [W]\\n0, 600.00 W\\nUnable to determine the device handle\\n")
    [{'index': '0', 'power.limit': '600.00 W'}]
    """
    rows = [line for line in text.splitlines() if line.strip()]
    if not rows:
        return []
    names = [re.sub(r"\s*\[.*\]$", "", column.strip()) for column in rows[0].split(",")]
    gpus = []
    for row in rows[1:]:
        values = [value.strip() for value in row.split(",")]
        if len(values) == len(names):
            gpus.append({names[column]: None if value.strip("[]").lower() in UNAVAILABLE else value
                         for column, value in enumerate(values)})
    return gpus


def number(value: str | None) -> float | None:
    """The first number of a value (``600.00 W`` -> 600.0), None when there is none."""
    found = _NUMBER.search(value or "")
    return float(found.group()) if found else None


def flag(value: str | None) -> float | None:
    """``Yes``/``Active``/``Enabled`` -> 1, ``No``/``Not Active``/``Disabled`` -> 0, None when not reported."""
    return None if value is None else float(value.strip().lower() in ("yes", "active", "enabled", "1"))


def bus_id(value: str | None) -> str:
    """A PCI address in sysfs' form: nvidia-smi's ``00000000:41:00.0`` and an Xid's ``PCI:0000:41:00`` alike.

    >>> bus_id("00000000:41:00.0"), bus_id("PCI:0000:C1:00")
    ('0000:41:00.0', '0000:c1:00.0')
    """
    found = _BUS_ID.match((value or "").strip())
    if not found:
        return (value or "").strip().lower()
    domain, bus, device, function = found.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}.{function or '0'}"


def scaled(factor: float) -> Callable[[str | None], float | None]:
    """A number in the unit nvidia-smi prints -> the base unit (MHz -> Hz, MiB -> bytes, % -> ratio, us -> s)."""
    return lambda value: None if (found := number(value)) is None else found * factor


#: field -> (metric, extra labels, how its text becomes a value). ``_total`` names are counters (since driver load).
VALUES: dict[str, tuple[str, dict[str, str], Callable[[str | None], float | None]]] = {
    "pcie.link.gen.gpucurrent": ("rigforge_gpu_pcie_link_gen_current", {}, number),
    "pcie.link.gen.max": ("rigforge_gpu_pcie_link_gen_max", {}, number),
    "pcie.link.width.current": ("rigforge_gpu_pcie_link_width_current", {}, number),
    "pcie.link.width.max": ("rigforge_gpu_pcie_link_width_max", {}, number),
    "power.limit": ("rigforge_gpu_power_limit_watts", {}, number),
    "power.draw": ("rigforge_gpu_power_draw_watts", {}, number),
    "temperature.gpu": ("rigforge_gpu_temperature_celsius", {}, number),
    "temperature.memory": ("rigforge_gpu_memory_temperature_celsius", {}, number),
    "temperature.gpu.tlimit": ("rigforge_gpu_temperature_margin_celsius", {}, number),
    "persistence_mode": ("rigforge_gpu_persistence_mode", {}, flag),
    "clocks.current.sm": ("rigforge_gpu_clock_hertz", {"clock": "sm"}, scaled(1e6)),
    "clocks.current.memory": ("rigforge_gpu_clock_hertz", {"clock": "memory"}, scaled(1e6)),
    "clocks.max.sm": ("rigforge_gpu_clock_max_hertz", {"clock": "sm"}, scaled(1e6)),
    "clocks.max.memory": ("rigforge_gpu_clock_max_hertz", {"clock": "memory"}, scaled(1e6)),
    "utilization.gpu": ("rigforge_gpu_utilization_ratio", {}, scaled(0.01)),
    "utilization.memory": ("rigforge_gpu_memory_utilization_ratio", {}, scaled(0.01)),
    "memory.used": ("rigforge_gpu_memory_used_bytes", {}, scaled(2**20)),
    "memory.total": ("rigforge_gpu_memory_total_bytes", {}, scaled(2**20)),
    "ecc.errors.corrected.volatile.total": ("rigforge_gpu_ecc_errors_total", {"type": "corrected"}, number),
    "ecc.errors.uncorrected.volatile.total": ("rigforge_gpu_ecc_errors_total", {"type": "uncorrected"}, number),
    "retired_pages.pending": ("rigforge_gpu_retired_pages_pending", {}, flag),
    "remapped_rows.correctable": ("rigforge_gpu_remapped_rows_total", {"cause": "correctable"}, number),
    "remapped_rows.uncorrectable": ("rigforge_gpu_remapped_rows_total", {"cause": "uncorrectable"}, number),
    "remapped_rows.pending": ("rigforge_gpu_remapped_rows_pending", {}, flag),
    "remapped_rows.failure": ("rigforge_gpu_remapped_rows_failure", {}, flag),
    **{field: ("rigforge_gpu_clocks_event_reason_active", {"reason": field.split(".", 1)[1]}, flag)
       for field in QUERY_FIELDS if field.startswith("clocks_event_reasons.")},
    **{field: ("rigforge_gpu_clocks_event_seconds_total", {"reason": field.split(".", 1)[1]}, scaled(1e-6))
       for field in QUERY_FIELDS if field.startswith("clocks_event_reasons_counters.")},
}


def gpu_samples(expected: Mapping[str, Any] | None, query: Query) -> list[Sample]:
    """Every GPU series: counts, nvidia-smi's state, and per GPU the values beside the profile's expectations.

    + expected: the profile's ``gpus`` (count, model, pcie_gen, pcie_width, persistence_mode, power_limit_w),
      None on a CPU-only rig
    + query: what ``run_query`` returned
    """
    gpus = parse_query_csv(query.output) if query.output is not None else []
    usable = query.output is not None and query.exit_code in VALID_OUTPUT_CODES
    present = not (query.output is None and query.error is None)
    samples: list[Sample] = [("rigforge_gpus_expected", {}, float(expected["count"] if expected else 0)),
                             ("rigforge_nvidia_smi_present", {}, float(present)),
                             ("rigforge_nvidia_smi_ok", {}, float(usable)),
                             ("rigforge_gpus_found", {}, float(len(gpus)))]
    if query.exit_code is not None:
        samples += [("rigforge_nvidia_smi_exit_code", {}, float(query.exit_code)),
                    ("rigforge_nvidia_smi_fields_refused", {}, float(len(query.refused)))]
    if query.exit_code in VALID_OUTPUT_CODES:
        samples.append(("rigforge_nvidia_smi_inforom_valid", {}, 0.0 if query.exit_code == 14 else 1.0))
    for gpu in gpus:
        samples += one_gpu(gpu, expected or {})
    return samples


def gpu_labels(gpu: Mapping[str, str | None]) -> dict[str, str]:
    """The labels of every series of one GPU: its index, UUID and PCI address."""
    return {"gpu": gpu.get("index") or "?", "uuid": gpu.get("uuid") or "", "pci_bus_id": bus_id(gpu.get("pci.bus_id"))}


def one_gpu(gpu: Mapping[str, str | None], expected: Mapping[str, Any]) -> list[Sample]:
    """The series of one GPU."""
    labels = gpu_labels(gpu)
    samples: list[Sample] = [("rigforge_gpu_info", {**labels, "name": gpu.get("name") or ""}, 1.0)]
    if expected.get("model"):
        samples.append(("rigforge_gpu_model_as_expected", labels,
                        1.0 if expected["model"] in (gpu.get("name") or "") else 0.0))
    for field, (name, extra, convert) in VALUES.items():
        value = convert(gpu.get(field))
        if value is not None:
            samples.append((name, {**labels, **extra}, value))
    wanted = {
        "rigforge_gpu_pcie_link_gen_expected": expected.get("pcie_gen"),
        "rigforge_gpu_pcie_link_width_expected": expected.get("pcie_width"),
        "rigforge_gpu_power_limit_expected_watts": expected.get("power_limit_w"),
        "rigforge_gpu_persistence_mode_expected": None if expected.get("persistence_mode") is None
        else float(expected["persistence_mode"]),
    }
    samples += [(name, labels, float(value)) for name, value in wanted.items() if value is not None]
    return samples


def driver_samples(query_error: str | None, module_file: str = MODULE_VERSION,
                   libraries: str = NVML_LIBRARIES) -> list[Sample]:
    """The loaded module against the installed user-space driver: a reboot is pending when they differ.

    + query_error: nvidia-smi's message when the query failed ("Driver/library version mismatch" says it too)
    + module_file, libraries: where the two versions are read (tests point them elsewhere)
    """
    loaded = None
    if os.path.exists(module_file):
        with open(module_file, encoding="utf-8") as handle:
            loaded = handle.read().strip() or None
    installed = sorted({found.group(1) for path in glob.glob(libraries) if (found := _VERSION.search(path))})
    user_space = installed[-1] if installed else None
    if loaded is None and user_space is None:
        return [("rigforge_nvidia_driver_present", {}, 0.0)]
    mismatch = "version mismatch" in (query_error or "").lower() or (
        loaded is not None and user_space is not None and loaded != user_space)
    return [("rigforge_nvidia_driver_present", {}, 1.0),
            ("rigforge_nvidia_driver_info", {"loaded": loaded or "", "installed": user_space or ""}, 1.0),
            ("rigforge_driver_reboot_pending", {}, 1.0 if mismatch else 0.0)]
