"""Kernel command line, IOMMU state, CPU governors and NUMA layout on real captures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rigforge.facts.host import (
    CpuGovernors,
    IommuState,
    KernelCmdline,
    NumaLayout,
    cmdline_has,
    cmdline_value,
    parse_cmdline,
    parse_cpu_governors,
    parse_iommu_state,
    requested_iommu_mode,
)
from rigforge.reads.parsing import parse_cpu_list

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
CAPTURES = sorted(path for path in FIXTURES.iterdir() if (path / "manifest.tsv").exists())


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_cmdline_real(capture: Path) -> None:
    tokens = KernelCmdline().process((capture / "proc-cmdline.txt").read_text().splitlines())
    assert tokens[0] == "mitigations=auto,no_guest_host,no_guest_guest"
    # Init's arguments after `--` are not kernel parameters.
    assert "--firecracker-init" not in tokens and "--" not in tokens
    assert cmdline_has(tokens, "quiet")
    assert cmdline_has(tokens, "mitigations=auto")
    assert not cmdline_has(tokens, "mitigations=off")
    assert not cmdline_has(tokens, "pci=realloc")
    assert cmdline_value(tokens, "pci") == "realloc=off"
    assert cmdline_value(tokens, "iommu") is None
    assert requested_iommu_mode(tokens) is None


def test_cmdline_of_two_pix_profile() -> None:
    # The kernel line of rig-facts section 2.2, plus a quoted module parameter.
    tokens = parse_cmdline(
        "BOOT_IMAGE=/vmlinuz ro pci=noacs,realloc iommu=pt mitigations=off pcie_aspm=off "
        'nvidia.NVreg_RegistryDwords="ForceP2P=0x11;RMForceP2PType=1"\n'
    )
    assert cmdline_has(tokens, "pci=noacs") and cmdline_has(tokens, "pci=realloc")
    assert cmdline_has(tokens, "iommu=pt") and cmdline_has(tokens, "pcie_aspm=off")
    assert not cmdline_has(tokens, "pcie_port_pm=off")
    assert cmdline_has(tokens, "ro")
    assert cmdline_value(tokens, "nvidia.NVreg_RegistryDwords") == "ForceP2P=0x11;RMForceP2PType=1"
    assert requested_iommu_mode(tokens) == "passthrough"


def test_cmdline_last_value_wins_and_empty() -> None:
    assert cmdline_value(("iommu=on", "iommu=pt"), "iommu") == "pt"
    assert parse_cmdline("") == ()
    assert KernelCmdline.default() == ()


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_iommu_real_is_off(capture: Path) -> None:
    status = IommuState().process((capture / "fact-IommuState.txt").read_text().splitlines())
    count = int((capture / "iommu_groups-count.txt").read_text())
    assert status.group_count == count == 0
    assert status.mode == "off" and status.requested is None
    # The kernel's default domain type is logged even with no IOMMU to apply it to.
    assert "Default domain type: Translated" in (capture / "dmesg-iommu.txt").read_text()


# Hand-written in the fact's output layout (cmdline, marker, `wc -l`, marker, `sort | uniq -c`):
# the captured VMs have no IOMMU groups.
def _iommu_output(cmdline: str, groups: int, types: dict[str, int]) -> str:
    counts = "\n".join(f"{count:7d} {kind}" for kind, count in types.items())
    return f"{cmdline}\n## iommu_groups\n{groups}\n## iommu_group_types\n{counts}\n"


@pytest.mark.parametrize(
    ("cmdline", "groups", "types", "mode", "requested"),
    [
        ("ro iommu=pt", 48, {"identity": 47, "unmanaged": 1}, "passthrough", "passthrough"),
        ("ro", 48, {"DMA-FQ": 48}, "translated", None),
        ("ro iommu=pt", 48, {"DMA": 2, "identity": 46}, "translated", "passthrough"),
        ("ro amd_iommu=off iommu=off", 0, {}, "off", "off"),
        ("ro iommu=pt", 48, {}, "passthrough", "passthrough"),
        ("ro", 48, {}, "unknown", None),
        ("ro", 2, {"unmanaged": 2}, "unknown", None),
    ],
    ids=["pt", "dma-fq", "mixed", "off", "pt-no-types", "no-types", "vfio-only"],
)
def test_iommu_modes(cmdline: str, groups: int, types: dict[str, int], mode: str, requested: str | None) -> None:
    status = parse_iommu_state(_iommu_output(cmdline, groups, types))
    assert (status.mode, status.requested, status.group_count) == (mode, requested, groups)
    assert status.group_types == types


def test_iommu_default_is_unknown() -> None:
    assert IommuState.default().mode == "unknown"


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_governors_absent_on_real_vm(capture: Path) -> None:
    # No cpufreq on the captured machines: the fact prints nothing, pyinfra gives default().
    assert (capture / "fact-CpuGovernors.txt").read_text() == ""
    assert (capture / "scaling_governor-cpu0.txt.stderr").exists()
    assert CpuGovernors.default() is None
    assert CpuGovernors().process([""]) is None


def test_governors_parse() -> None:
    # Hand-written in `grep -H` layout (path:value); cpu10 sorts after cpu2.
    lines = [
        "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor:performance",
        "/sys/devices/system/cpu/cpu10/cpufreq/scaling_governor:schedutil",
        "/sys/devices/system/cpu/cpu2/cpufreq/scaling_governor:performance",
    ]
    assert CpuGovernors().process(lines) == {0: "performance", 2: "performance", 10: "schedutil"}
    assert parse_cpu_governors("") == {}


def _numactl_nodes(text: str) -> dict[int, tuple[int, ...]]:
    """`node N cpus: ...` lines of the real `numactl -H` capture, as a second opinion."""
    nodes = {}
    for match in re.finditer(r"^node (\d+) cpus:(.*)$", text, re.MULTILINE):
        nodes[int(match.group(1))] = tuple(int(cpu) for cpu in match.group(2).split())
    return nodes


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_numa_real_agrees_with_numactl_and_lscpu(capture: Path) -> None:
    nodes = NumaLayout().process((capture / "fact-NumaLayout.txt").read_text().splitlines())
    lscpu = (capture / "lscpu.txt").read_text()
    online = re.search(r"^On-line CPU\(s\) list:\s*(\S+)", lscpu, re.MULTILINE)
    assert online is not None
    assert {node.node: node.cpus for node in nodes} == _numactl_nodes((capture / "numactl-H.txt").read_text())
    assert nodes[0].cpus == parse_cpu_list(online.group(1))
    assert nodes[0].memory_total_kib is not None and nodes[0].memory_total_kib > 1_000_000


def test_numa_two_nodes_and_absent() -> None:
    # Hand-written in the fact's layout with the Turin NUMA0 CPU list of rig-facts section 4.1.
    lines = [
        "/sys/devices/system/node/node0/cpulist:0-63,128-191",
        "/sys/devices/system/node/node1/cpulist:64-127,192-255",
        "/sys/devices/system/node/node0/meminfo:Node 0 MemTotal:       1188000000 kB",
        "/sys/devices/system/node/node1/meminfo:Node 1 MemTotal:       1188000000 kB",
    ]
    node0, node1 = NumaLayout().process(lines)
    assert len(node0.cpus) == len(node1.cpus) == 128
    assert node1.memory_total_kib == 1188000000
    assert NumaLayout.default() == ()


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0-3,8", (0, 1, 2, 3, 8)), ("0-63,128-191", tuple(range(64)) + tuple(range(128, 192))), ("N/A", ()), ("", ())],
)
def test_cpu_list(text: str, cpus: tuple[int, ...]) -> None:
    assert parse_cpu_list(text) == cpus
