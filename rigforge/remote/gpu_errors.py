"""What a GPU's errors look like outside the query: Xid lines in the kernel log, PCIe replays and AER counters.

Standard library only: installed beside ``health_metrics.py`` on the rig (``/opt/rigforge/lib/monitoring``).
The early warnings of a bad riser or a failing card, as dcgm-exporter counts them: every Xid per GPU and code
(one without a known-failure signature of its own is counted too), the GPU's PCIe replay counter (nvidia-smi's
"Replays Since Reset", which no ``--query-gpu`` field carries, so it is read from ``nvidia-smi -q`` at most every
``REPLAY_EVERY_S``) and the kernel's AER counters of the GPU and of the port above it, where the host exposes
them (``/sys/bus/pci/devices/*/aer_dev_*``; a VM often does not). Each series carries ``pci_bus_id`` in sysfs'
form and the GPU's ``uuid`` from the driver's own ``/proc/driver/nvidia/gpus/*/information``, which answers
when nvidia-smi does not.

    samples = aer_samples(gpu_uuids())
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable, Mapping

try:  # the repository (tests); on the rig the modules lie beside this file
    from rigforge.remote.gpu_health import NVIDIA_SMI, Sample, bus_id, number
except ImportError:  # pragma: no cover - the rig's layout
    from gpu_health import NVIDIA_SMI, Sample, bus_id, number  # type: ignore[no-redef]

PROC_GPUS = "/proc/driver/nvidia/gpus/*/information"
SYSFS_PCI = "/sys/bus/pci/devices"
#: ``nvidia-smi -q`` costs far more than the query: its replay counters are read this often, and the last values
#: written again in between.
REPLAY_EVERY_S = 300
#: The kernel's AER files of a device -> the severity label; each holds one ``TOTAL_ERR_*`` line.
AER_FILES = {"aer_dev_correctable": "correctable", "aer_dev_nonfatal": "nonfatal", "aer_dev_fatal": "fatal"}
#: ``NVRM: Xid (PCI:0000:41:00): 79, pid=...``: the GPU's address and the code (older drivers drop ``PCI:``).
XID = re.compile(r"NVRM: Xid \(((?:PCI:)?[0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\): (\d+)")
_SECTION = re.compile(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_FIELD = re.compile(r"^\s+([^:]+?)\s+:\s(.*)$")


def gpu_uuids(information: str = PROC_GPUS) -> dict[str, str]:
    """PCI address -> UUID of every GPU the NVIDIA driver holds (empty without the driver)."""
    uuids = {}
    for path in glob.glob(information):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                found = re.search(r"^GPU UUID:\s*(\S+)", handle.read(), re.MULTILINE)
        except OSError:
            continue
        uuids[bus_id(os.path.basename(os.path.dirname(path)))] = found.group(1) if found else ""
    return uuids


def count_xids(lines: Iterable[tuple[str, float]], counts: dict[str, list[float]]) -> None:
    """Add the Xid lines among ``(message, unix seconds)`` to ``counts``: ``"bus|xid"`` -> [lines, last seen]."""
    for message, at in lines:
        found = XID.search(message)
        if found:
            key = f"{bus_id(found.group(1))}|{found.group(2)}"
            seen = counts.setdefault(key, [0.0, 0.0])
            seen[0] += 1
            seen[1] = max(seen[1], at)


def xid_samples(counts: Mapping[str, list[float]], uuids: Mapping[str, str]) -> list[Sample]:
    """Each GPU's Xid lines since boot per code, and when the last one was logged."""
    samples: list[Sample] = []
    for key, (lines, last) in sorted(counts.items()):
        pci, xid = key.split("|")
        labels = {"xid": xid, "pci_bus_id": pci, "uuid": uuids.get(pci, "")}
        samples += [("rigforge_gpu_xid_errors_total", labels, lines),
                    ("rigforge_gpu_xid_last_timestamp_seconds", labels, last)]
    return samples


def replay_argv() -> list[str]:
    """nvidia-smi's full report: its PCI section per GPU holds "Replays Since Reset" and "Replay Number Rollovers"."""
    return [NVIDIA_SMI, "-q"]


def parse_replays(text: str) -> dict[str, dict[str, float]]:
    """``nvidia-smi -q`` -> PCI address -> {"replays": n, "rollovers": n} (a GPU that reports neither is left out)."""
    found: dict[str, dict[str, float]] = {}
    current: str | None = None
    names = {"Replays Since Reset": "replays", "Replay Number Rollovers": "rollovers"}
    for line in text.splitlines():
        section = _SECTION.match(line)
        if section:
            current = bus_id(section.group(1))
            continue
        field = _FIELD.match(line)
        if current and field and field.group(1) in names and (value := number(field.group(2))) is not None:
            found.setdefault(current, {})[names[field.group(1)]] = value
    return found


def replay_samples(replays: Mapping[str, Mapping[str, float]], uuids: Mapping[str, str]) -> list[Sample]:
    """The replay counters per GPU (counters since the GPU was reset)."""
    samples: list[Sample] = []
    for pci, values in sorted(replays.items()):
        labels = {"pci_bus_id": pci, "uuid": uuids.get(pci, "")}
        for key, name in (("replays", "rigforge_gpu_pcie_replays_total"),
                          ("rollovers", "rigforge_gpu_pcie_replay_rollovers_total")):
            if key in values:
                samples.append((name, labels, values[key]))
    return samples


def read_aer(device: str) -> dict[str, float]:
    """A device's AER totals by severity; empty where the kernel exposes none."""
    totals = {}
    for name, severity in AER_FILES.items():
        try:
            with open(os.path.join(device, name), encoding="utf-8") as handle:
                text = handle.read()
        except OSError:
            continue
        found = re.search(r"^TOTAL_ERR_\w+\s+(\d+)", text, re.MULTILINE)
        if found:
            totals[severity] = float(found.group(1))
    return totals


def aer_samples(uuids: Mapping[str, str], sysfs: str = SYSFS_PCI) -> list[Sample]:
    """AER totals of each GPU (``link_end="gpu"``) and of the port it hangs from (``"upstream"``: bridge, riser)."""
    samples: list[Sample] = []
    for pci, uuid in sorted(uuids.items()):
        device = os.path.realpath(os.path.join(sysfs, pci))
        upstream = os.path.dirname(device)
        ends = {"gpu": device}
        if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", os.path.basename(upstream)):
            ends["upstream"] = upstream
        for end, path in ends.items():
            for severity, total in read_aer(path).items():
                samples.append(("rigforge_gpu_pcie_aer_errors_total",
                                {"pci_bus_id": pci, "uuid": uuid, "link_end": end, "aer_severity": severity}, total))
    return samples
