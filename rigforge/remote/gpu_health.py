"""The GPU part of the rig's health metrics: one ``nvidia-smi --query-gpu`` and the driver's two versions.

Standard library only: installed beside ``health_metrics.py`` on the rig (``/opt/rigforge/lib/monitoring``).
Each GPU's values come back as gauges next to what the profile expects of them, so an alerting rule compares
two series of the same labels; a value the card does not report (``[N/A]``: retired pages on cards that remap
rows, ECC on cards without it) is left out, never written as 0. Without nvidia-smi (the CPU-only sandbox) the
only GPU series say so: ``rigforge_gpus_found 0`` and ``rigforge_nvidia_smi_present 0``.

    samples = gpu_samples(expected, run_query())
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
from collections.abc import Mapping
from typing import Any

#: One sample: metric name, labels, value.
Sample = tuple[str, dict[str, str], float]

#: The fields of the one query, each a documented ``nvidia-smi --help-query-gpu`` name.
QUERY_FIELDS = ("index", "name", "uuid", "pci.bus_id", "driver_version", "persistence_mode", "power.limit",
                "power.draw", "temperature.gpu", "pcie.link.gen.current", "pcie.link.gen.max",
                "pcie.link.width.current", "pcie.link.width.max", "ecc.errors.uncorrected.volatile.total",
                "retired_pages.pending")
NVIDIA_SMI = "nvidia-smi"
#: The loaded kernel module's version, and the user-space library whose file name carries the installed one.
MODULE_VERSION = "/sys/module/nvidia/version"
NVML_LIBRARIES = "/usr/lib/*/libnvidia-ml.so.*.*"
#: What nvidia-smi prints where a card cannot give a value.
UNAVAILABLE = ("n/a", "not supported", "unknown error")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_VERSION = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$")


def query_argv() -> list[str]:
    """The one nvidia-smi query (with its header row, so the parser maps columns by name)."""
    return [NVIDIA_SMI, f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv"]


def run_query(timeout_s: float = 20) -> tuple[str | None, str | None]:
    """Run the query: (its output, None), (None, nvidia-smi's message) when it failed, (None, None) without it."""
    try:
        run = subprocess.run(query_argv(), capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        return None, None
    except subprocess.TimeoutExpired:
        return None, f"nvidia-smi did not answer within {timeout_s:g} s"
    if run.returncode != 0:
        lines = (run.stdout + run.stderr).strip().splitlines()
        return None, lines[-1] if lines else f"nvidia-smi exited {run.returncode}"
    return run.stdout, None


def parse_query_csv(text: str) -> list[dict[str, str | None]]:
    """``--format=csv`` output -> one mapping per GPU, keyed by field name (units in the header dropped).

    A value nvidia-smi cannot give (``[N/A]``, ``N/A``, ``[Not Supported]``) is None.

    >>> parse_query_csv("index, power.limit [W]\\n0, 600.00 W\\n")
    [{'index': '0', 'power.limit': '600.00 W'}]
    """
    rows = [line for line in text.splitlines() if line.strip()]
    if not rows:
        return []
    names = [re.sub(r"\s*\[.*\]$", "", column.strip()) for column in rows[0].split(",")]
    gpus = []
    for row in rows[1:]:
        values = [value.strip() for value in row.split(",")]
        if len(values) != len(names):
            raise ValueError(f"nvidia-smi: {len(values)} values for {len(names)} columns in {row!r}")
        gpus.append({names[column]: None if value.strip("[]").lower() in UNAVAILABLE else value
                     for column, value in enumerate(values)})
    return gpus


def number(value: str | None) -> float | None:
    """The first number of a value (``600.00 W`` -> 600.0), None when there is none."""
    found = _NUMBER.search(value or "")
    return float(found.group()) if found else None


def gpu_samples(expected: Mapping[str, Any] | None, query: tuple[str | None, str | None]) -> list[Sample]:
    """Every GPU gauge: counts, and per GPU the value and the profile's expectation side by side.

    + expected: the profile's ``gpus`` (count, model, pcie_gen, pcie_width, persistence_mode, power_limit_w),
      None on a CPU-only rig
    + query: what ``run_query`` returned
    """
    output, error = query
    samples: list[Sample] = [("rigforge_gpus_expected", {}, float(expected["count"] if expected else 0)),
                             ("rigforge_nvidia_smi_present", {}, 0.0 if output is None and error is None else 1.0),
                             ("rigforge_nvidia_smi_ok", {}, 1.0 if output is not None else 0.0)]
    gpus = parse_query_csv(output) if output is not None else []
    samples.append(("rigforge_gpus_found", {}, float(len(gpus))))
    for gpu in gpus:
        samples += one_gpu(gpu, expected or {})
    return samples


def one_gpu(gpu: Mapping[str, str | None], expected: Mapping[str, Any]) -> list[Sample]:
    """The gauges of one GPU (labels: its index)."""
    labels = {"gpu": gpu.get("index") or "?"}
    info = {**labels, "name": gpu.get("name") or "", "uuid": gpu.get("uuid") or "",
            "pci_bus_id": gpu.get("pci.bus_id") or ""}
    samples: list[Sample] = [("rigforge_gpu_info", info, 1.0)]
    if expected.get("model"):
        samples.append(("rigforge_gpu_model_as_expected", labels,
                        1.0 if expected["model"] in (gpu.get("name") or "") else 0.0))
    values = {
        "rigforge_gpu_pcie_link_gen_current": number(gpu.get("pcie.link.gen.current")),
        "rigforge_gpu_pcie_link_gen_max": number(gpu.get("pcie.link.gen.max")),
        "rigforge_gpu_pcie_link_width_current": number(gpu.get("pcie.link.width.current")),
        "rigforge_gpu_pcie_link_width_max": number(gpu.get("pcie.link.width.max")),
        "rigforge_gpu_power_limit_watts": number(gpu.get("power.limit")),
        "rigforge_gpu_power_draw_watts": number(gpu.get("power.draw")),
        "rigforge_gpu_temperature_celsius": number(gpu.get("temperature.gpu")),
        "rigforge_gpu_ecc_uncorrected_volatile_errors": number(gpu.get("ecc.errors.uncorrected.volatile.total")),
        "rigforge_gpu_persistence_mode": None if gpu.get("persistence_mode") is None
        else float(gpu.get("persistence_mode") == "Enabled"),
    }
    pending = gpu.get("retired_pages.pending")
    if pending is not None:
        values["rigforge_gpu_retired_pages_pending"] = float(pending.lower() in ("yes", "1"))
    wanted = {
        "rigforge_gpu_pcie_link_gen_expected": expected.get("pcie_gen"),
        "rigforge_gpu_pcie_link_width_expected": expected.get("pcie_width"),
        "rigforge_gpu_power_limit_expected_watts": expected.get("power_limit_w"),
        "rigforge_gpu_persistence_mode_expected": None if expected.get("persistence_mode") is None
        else float(expected["persistence_mode"]),
    }
    for name, value in {**values, **wanted}.items():
        if value is not None:
            samples.append((name, labels, float(value)))
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
