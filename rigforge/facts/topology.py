"""GPU/NIC topology matrix from `nvidia-smi topo -m`.

Real layout (driver 580, see tests/fixtures/gpu/*/nvidia-smi-topo-m.txt): a tab-separated header
underlined with terminal escapes even into a pipe, rows `GPU0<TAB> X <TAB>NV18<TAB>...`, then
`CPU Affinity`, `NUMA Affinity`, an empty field and `GPU NUMA ID`; NIC rows leave those empty;
a `Legend:` and an optional `NIC Legend:` (`NIC0: mlx5_0`) follow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyinfra.api import FactBase

from rigforge.reads.parsing import parse_cpu_list, strip_ansi

AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")

# Best to worst path between two devices, as nvidia-smi's legend orders them.
LINK_ORDER = ("X", "NV#", "PIX", "PXB", "PHB", "NODE", "SYS")
# Drivers before the NODE class named the cross-socket path SOC.
_LINK_ALIASES = {"SOC": "SYS"}


@dataclass(frozen=True)
class DeviceAffinity:
    """CPU and NUMA placement of one matrix row (None where nvidia-smi leaves it empty or N/A)."""

    cpu_affinity: str | None
    cpus: tuple[int, ...]
    numa_affinity: str | None
    gpu_numa_id: str | None


@dataclass(frozen=True)
class GpuTopology:
    """The pairwise link matrix of GPUs and NICs.

    + devices: column names in nvidia-smi's order, GPUs first (`GPU0`, ..., `NIC0`, ...)
    + links: {(row, column): link class} for every cell, `X` on the diagonal
    + affinity: {device: DeviceAffinity}
    + nic_names: {`NIC0`: `mlx5_0`} from the NIC legend
    """

    devices: tuple[str, ...]
    links: dict[tuple[str, str], str]
    affinity: dict[str, DeviceAffinity]
    nic_names: dict[str, str]

    @property
    def gpus(self) -> tuple[str, ...]:
        """GPU device names in index order."""
        return tuple(device for device in self.devices if device.startswith("GPU"))


def link_rank(link: str) -> int:
    """Position of a link class in LINK_ORDER (NV1..NV18 all rank as NV#); unknown ranks worst."""
    link = _LINK_ALIASES.get(link, link)
    if re.fullmatch(r"NV\d+", link):
        link = "NV#"
    return LINK_ORDER.index(link) if link in LINK_ORDER else len(LINK_ORDER)


def _device_name(device: int | str) -> str:
    return f"GPU{device}" if isinstance(device, int) else device


def link_class(topology: GpuTopology, a: int | str, b: int | str) -> str:
    """The link class between two devices: GPU indices (0, 1) or names ("GPU0", "NIC1").

    Raises KeyError for a device the matrix does not have.
    """
    key = (_device_name(a), _device_name(b))
    if key not in topology.links:
        raise KeyError(f"no topology entry for {key[0]} <-> {key[1]}")
    return topology.links[key]


def worst_gpu_link(topology: GpuTopology) -> str:
    """The slowest link class between any two GPUs (e.g. `SYS` on a two-socket rig).

    With fewer than two GPUs there is no pair, and the answer is `X` (self).
    """
    gpus = topology.gpus
    pairs = [topology.links[(a, b)] for a in gpus for b in gpus if a != b and (a, b) in topology.links]
    return max(pairs, key=link_rank, default="X")


def _none_if_blank(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if value in ("", "N/A") else value


def _affinity(extra_columns: list[str], values: list[str]) -> DeviceAffinity:
    """Map the trailing fields of a row onto the affinity columns.

    nvidia-smi prints two tabs before `GPU NUMA ID`, so the row has one field more than the
    header: columns map left to right, except the last column, which takes the last field.
    """
    mapped: dict[str, str | None] = {}
    for position, column in enumerate(extra_columns):
        is_last = position == len(extra_columns) - 1
        if is_last and len(values) > len(extra_columns):
            mapped[column] = _none_if_blank(values[-1])
        else:
            mapped[column] = _none_if_blank(values[position] if position < len(values) else None)
    cpu_affinity = mapped.get("CPU Affinity")
    return DeviceAffinity(
        cpu_affinity=cpu_affinity,
        cpus=parse_cpu_list(cpu_affinity) if cpu_affinity else (),
        numa_affinity=mapped.get("NUMA Affinity"),
        gpu_numa_id=mapped.get("GPU NUMA ID"),
    )


def _parse_nic_legend(lines: list[str]) -> dict[str, str]:
    names: dict[str, str] = {}
    in_legend = False
    for line in lines:
        if line.strip() == "NIC Legend:":
            in_legend = True
        elif in_legend:
            match = re.fullmatch(r"\s*(NIC\d+):\s*(\S+)\s*", line)
            if match:
                names[match.group(1)] = match.group(2)
    return names


def parse_topology(text: str) -> GpuTopology | None:
    """Parse `nvidia-smi topo -m`. None when the output holds no matrix (no GPUs, errors)."""
    lines = strip_ansi(text).splitlines()
    header_at = next((i for i, line in enumerate(lines) if "CPU Affinity" in line), None)
    if header_at is None:
        return None
    columns = [field.strip() for field in lines[header_at].split("\t")]
    columns = [column for column in columns if column]
    devices = [column for column in columns if column not in AFFINITY_COLUMNS]
    extra_columns = [column for column in columns if column in AFFINITY_COLUMNS]

    links: dict[tuple[str, str], str] = {}
    affinity: dict[str, DeviceAffinity] = {}
    for line in lines[header_at + 1 :]:
        if not line.strip():
            break
        fields = line.split("\t")
        row = fields[0].strip()
        cells = [cell.strip() for cell in fields[1 : 1 + len(devices)]]
        # A row cut short (trailing fields trimmed by a copy) keeps the cells it has.
        for column, cell in zip(devices, cells, strict=False):
            links[(row, column)] = cell
        affinity[row] = _affinity(extra_columns, fields[1 + len(devices) :])
    return GpuTopology(
        devices=tuple(devices),
        links=links,
        affinity=affinity,
        nic_names=_parse_nic_legend(lines[header_at:]),
    )


class NvidiaTopology(FactBase[GpuTopology | None]):
    """
    Returns the GPU/NIC link matrix of `nvidia-smi topo -m` as a `GpuTopology`, or None where
    nvidia-smi is missing or prints no matrix.

    .. code:: python

        topology = host.get_fact(NvidiaTopology)
        if topology and worst_gpu_link(topology) == "SYS":
            ...
    """

    def command(self) -> str:
        return "if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi topo -m; fi; true"

    def process(self, output: list[str]) -> GpuTopology | None:
        return parse_topology("\n".join(output))
