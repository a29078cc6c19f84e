"""Host facts that GPU work depends on: kernel command line, IOMMU mode, CPU governors, NUMA."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from pyinfra.api import FactBase

from rigforge.reads.parsing import parse_cpu_list, parse_grep_h, split_sections

IommuMode = Literal["off", "passthrough", "translated", "unknown"]

GROUPS_SECTION = "iommu_groups"
GROUP_TYPES_SECTION = "iommu_group_types"

# Default domain types the kernel writes to /sys/kernel/iommu_groups/*/type.
_PASSTHROUGH_TYPES = {"identity"}
_TRANSLATED_TYPES = {"DMA", "DMA-FQ"}
# Groups held by a user-space driver (VFIO) or blocked say nothing about the default mode.
_OTHER_TYPES = {"blocked", "unmanaged"}


def parse_cmdline(text: str) -> tuple[str, ...]:
    """Split /proc/cmdline into kernel parameters, in order.

    Double quotes group a value with spaces (`foo="a b"`) and are removed, as the kernel does.
    Everything after a lone `--` belongs to init, not the kernel, and is left out.
    """
    tokens: list[str] = []
    for match in re.finditer(r'(?:[^\s"]+|"[^"]*")+', text):
        token = match.group(0).replace('"', "")
        if token == "--":
            break
        tokens.append(token)
    return tuple(tokens)


def cmdline_value(tokens: tuple[str, ...], key: str) -> str | None:
    """The value of the last `key=value` token, or None when `key` is not set."""
    value: str | None = None
    for token in tokens:
        name, sep, setting = token.partition("=")
        if sep and name == key:
            value = setting
    return value


def cmdline_has(tokens: tuple[str, ...], wanted: str) -> bool:
    """True when the command line sets `wanted`.

    A bare flag (`nomodeset`) must appear as a token. `key=value` matches a token with that key
    whose value is `value` or a comma list holding it, so `pci=noacs` is found in
    `pci=noacs,realloc`. Any occurrence counts, as the kernel applies each `pci=`/`iommu=` in turn.
    """
    key, sep, value = wanted.partition("=")
    if not sep:
        return wanted in tokens
    for token in tokens:
        name, token_sep, setting = token.partition("=")
        if token_sep and name == key and (setting == value or value in setting.split(",")):
            return True
    return False


def requested_iommu_mode(tokens: tuple[str, ...]) -> IommuMode | None:
    """What the command line asks of the IOMMU, or None when it says nothing."""
    if any(cmdline_has(tokens, flag) for flag in ("iommu=off", "amd_iommu=off", "intel_iommu=off")):
        return "off"
    if cmdline_has(tokens, "iommu=pt") or cmdline_has(tokens, "iommu.passthrough=1"):
        return "passthrough"
    if cmdline_has(tokens, "iommu=nopt") or cmdline_has(tokens, "iommu.passthrough=0"):
        return "translated"
    return None


@dataclass(frozen=True)
class IommuStatus:
    """The IOMMU as the running kernel has it.

    + mode: `off` (no IOMMU groups: nothing is remapped), `passthrough` (groups use identity
      domains), `translated` (some group remaps DMA), `unknown` (groups exist but their type is
      not readable and the command line says nothing)
    + requested: what the kernel command line asks for (None when silent)
    + group_count: entries in /sys/kernel/iommu_groups
    + group_types: {domain type: count}, e.g. {"identity": 64}
    """

    mode: IommuMode
    requested: IommuMode | None
    group_count: int
    group_types: dict[str, int]


def _parse_group_types(text: str) -> dict[str, int]:
    """Parse `sort | uniq -c` output (`     12 DMA-FQ`) into {type: count}."""
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            counts[parts[1]] += int(parts[0])
    return dict(counts)


def parse_iommu_state(text: str) -> IommuStatus:
    """Parse the `IommuState` fact output: /proc/cmdline, group count, group types."""
    sections = split_sections(text)
    requested = requested_iommu_mode(parse_cmdline(sections[""]))
    count_text = sections.get(GROUPS_SECTION, "").strip()
    group_count = int(count_text) if count_text.isdigit() else 0
    group_types = _parse_group_types(sections.get(GROUP_TYPES_SECTION, ""))

    mode: IommuMode
    if group_count == 0:
        mode = "off"
    elif set(group_types) & _TRANSLATED_TYPES:
        mode = "translated"
    elif set(group_types) & _PASSTHROUGH_TYPES and set(group_types) <= _PASSTHROUGH_TYPES | _OTHER_TYPES:
        mode = "passthrough"
    elif requested in ("passthrough", "translated"):
        mode = requested
    else:
        mode = "unknown"
    return IommuStatus(mode=mode, requested=requested, group_count=group_count, group_types=group_types)


@dataclass(frozen=True)
class NumaNode:
    """One NUMA node: its CPUs and memory (None where meminfo is unreadable)."""

    node: int
    cpus: tuple[int, ...]
    memory_total_kib: int | None


def parse_numa_layout(text: str) -> tuple[NumaNode, ...]:
    """Parse `grep -H` over node*/cpulist and `grep -H MemTotal` over node*/meminfo."""
    cpus: dict[int, tuple[int, ...]] = {}
    memory: dict[int, int] = {}
    for path, value in parse_grep_h(text).items():
        match = re.search(r"/node(\d+)/(cpulist|meminfo)$", path)
        if not match:
            continue
        node = int(match.group(1))
        if match.group(2) == "cpulist":
            cpus[node] = parse_cpu_list(value)
        else:
            kib = re.search(r"MemTotal:\s*(\d+)\s*kB", value)
            if kib:
                memory[node] = int(kib.group(1))
    return tuple(
        NumaNode(node=node, cpus=cpus.get(node, ()), memory_total_kib=memory.get(node))
        for node in sorted(set(cpus) | set(memory))
    )


def parse_cpu_governors(text: str) -> dict[int, str]:
    """Parse `grep -H` over cpu*/cpufreq/scaling_governor into {cpu: governor}."""
    governors: dict[int, str] = {}
    for path, value in parse_grep_h(text).items():
        match = re.search(r"/cpu(\d+)/cpufreq/scaling_governor$", path)
        if match:
            governors[int(match.group(1))] = value.strip()
    return dict(sorted(governors.items()))


class KernelCmdline(FactBase[tuple[str, ...]]):
    """
    Returns the running kernel's parameters (/proc/cmdline) as an ordered tuple of tokens.

    .. code:: python

        tokens = host.get_fact(KernelCmdline)
        if not cmdline_has(tokens, "iommu=pt"):
            ...
    """

    def command(self) -> str:
        return "cat /proc/cmdline"

    @staticmethod
    def default() -> tuple[str, ...]:
        return ()

    def process(self, output: list[str]) -> tuple[str, ...]:
        return parse_cmdline("\n".join(output))


class IommuState(FactBase[IommuStatus]):
    """
    Returns the IOMMU mode (off / passthrough / translated / unknown) as an `IommuStatus`,
    judged from the IOMMU groups the kernel made and their domain types, with the command line
    as a fallback.

    .. code:: python

        if host.get_fact(IommuState).mode == "translated":
            ...
    """

    def command(self) -> str:
        return (
            f"cat /proc/cmdline; echo '## {GROUPS_SECTION}'; "
            "ls /sys/kernel/iommu_groups 2>/dev/null | wc -l; "
            f"echo '## {GROUP_TYPES_SECTION}'; "
            "cat /sys/kernel/iommu_groups/*/type 2>/dev/null | sort | uniq -c; true"
        )

    @staticmethod
    def default() -> IommuStatus:
        return IommuStatus(mode="unknown", requested=None, group_count=0, group_types={})

    def process(self, output: list[str]) -> IommuStatus:
        return parse_iommu_state("\n".join(output))


class CpuGovernors(FactBase[dict[int, str] | None]):
    """
    Returns {cpu number: scaling governor}, or None where cpufreq is absent (VMs, some BIOSes).

    .. code:: python

        governors = host.get_fact(CpuGovernors) or {}
        slow = [cpu for cpu, governor in governors.items() if governor != "performance"]
    """

    def command(self) -> str:
        return "grep -H '' /sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor 2>/dev/null; true"

    def process(self, output: list[str]) -> dict[int, str] | None:
        return parse_cpu_governors("\n".join(output)) or None


class NumaLayout(FactBase[tuple[NumaNode, ...]]):
    """
    Returns the NUMA nodes with their CPUs and memory from sysfs; empty where the kernel exposes
    no nodes.

    .. code:: python

        nodes = host.get_fact(NumaLayout)
        sizes = {node.node: node.memory_total_kib for node in nodes}
    """

    def command(self) -> str:
        return (
            "grep -H '' /sys/devices/system/node/node[0-9]*/cpulist 2>/dev/null; "
            "grep -H MemTotal /sys/devices/system/node/node[0-9]*/meminfo 2>/dev/null; true"
        )

    @staticmethod
    def default() -> tuple[NumaNode, ...]:
        return ()

    def process(self, output: list[str]) -> tuple[NumaNode, ...]:
        return parse_numa_layout("\n".join(output))
