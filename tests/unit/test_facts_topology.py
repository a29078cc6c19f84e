"""NvidiaTopology / parse_topology on real `nvidia-smi topo -m` output and rig-facts excerpts."""

from __future__ import annotations

from pathlib import Path

import pytest

from rigforge.facts.topology import NvidiaTopology, link_class, link_rank, parse_topology, worst_gpu_link

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
CAPTURES = sorted(path for path in FIXTURES.iterdir() if (path / "manifest.tsv").exists())


def _excerpt(name: str) -> str:
    return (FIXTURES / f"topo-m-{name}.txt").read_text()


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_real_capture_matches_gpu_count(capture: Path) -> None:
    topology = NvidiaTopology().process((capture / "fact-NvidiaTopology.txt").read_text().splitlines())
    gpu_lines = (capture / "nvidia-smi-L.txt").read_text().splitlines()
    assert topology is not None
    assert topology.gpus == tuple(f"GPU{i}" for i in range(len(gpu_lines)))
    assert all(link_class(topology, gpu, gpu) == "X" for gpu in topology.gpus)
    assert topology.nic_names == {}


def test_h100_single_gpu() -> None:
    topology = parse_topology((FIXTURES / "nvidia-h100-x1" / "nvidia-smi-topo-m.txt").read_text())
    assert topology is not None
    affinity = topology.affinity["GPU0"]
    assert (affinity.cpu_affinity, affinity.numa_affinity, affinity.gpu_numa_id) == ("0-15", "0", None)
    assert affinity.cpus == tuple(range(16))
    assert worst_gpu_link(topology) == "X"


def test_h200_pair_is_nvlinked() -> None:
    topology = parse_topology((FIXTURES / "nvidia-h200-x2" / "nvidia-smi-topo-m.txt").read_text())
    assert topology is not None
    assert link_class(topology, 0, 1) == link_class(topology, "GPU1", "GPU0") == "NV18"
    assert worst_gpu_link(topology) == "NV18"
    assert topology.affinity["GPU1"].cpus == tuple(range(32))


def test_two_gpu_pix_excerpt() -> None:
    topology = parse_topology(_excerpt("2gpu-excerpt-from-rig-facts-pix"))
    assert topology is not None and worst_gpu_link(topology) == "PIX"


def test_four_gpu_node_excerpt() -> None:
    topology = parse_topology(_excerpt("4gpu-excerpt-from-rig-facts-node"))
    assert topology is not None
    assert topology.gpus == ("GPU0", "GPU1", "GPU2", "GPU3")
    assert {link_class(topology, a, b) for a in range(4) for b in range(4) if a != b} == {"NODE"}


def test_eight_gpu_turin_excerpt() -> None:
    topology = parse_topology(_excerpt("8gpu-excerpt-from-rig-facts-turin"))
    assert topology is not None
    assert (link_class(topology, 0, 1), link_class(topology, 0, 2), link_class(topology, 0, 4)) == (
        "PIX",
        "NODE",
        "SYS",
    )
    assert worst_gpu_link(topology) == "SYS"
    assert topology.affinity["GPU3"].numa_affinity == "0"
    assert topology.affinity["GPU4"].numa_affinity == "1"
    assert topology.affinity["GPU0"].cpus[:2] == (0, 1) and 128 in topology.affinity["GPU0"].cpus


# Hand-written in the real layout of nvidia-smi 580 (no capture here had a NIC): NIC rows leave
# the four affinity fields empty, and one GPU row has empty CPU/NUMA affinity before `N/A`.
NIC_LAYOUT = (
    "\t\x1b[4mGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tSYS\tPIX\tSYS\t0-63,128-191\t0\t\tN/A\n"
    "GPU1\tSYS\t X \tSYS\tPIX\t\t\t\tN/A\n"
    "NIC0\tPIX\tSYS\t X \tSYS\t\t\t\t\n"
    "NIC1\tSYS\tPIX\tSYS\t X \t\t\t\t\n"
    "\n"
    "Legend:\n\n  X    = Self\n  PIX  = Connection traversing at most a single PCIe bridge\n\n"
    "NIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n"
)


def test_nic_rows_and_legend() -> None:
    topology = parse_topology(NIC_LAYOUT)
    assert topology is not None
    assert topology.devices == ("GPU0", "GPU1", "NIC0", "NIC1")
    assert topology.gpus == ("GPU0", "GPU1")
    assert topology.nic_names == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert link_class(topology, "GPU0", "NIC0") == "PIX"
    # NICs do not count towards the worst GPU-to-GPU link.
    assert worst_gpu_link(topology) == "SYS"
    assert topology.affinity["GPU1"].cpu_affinity is None
    assert topology.affinity["GPU1"].numa_affinity is None
    assert topology.affinity["NIC0"].cpus == ()


def test_legacy_layout_without_gpu_numa_id() -> None:
    # Older drivers: no `GPU NUMA ID` column, no trailing double tab.
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\t0-7\t0-1\nGPU1\tPHB\t X \t0-7\t0-1\n"
    topology = parse_topology(text)
    assert topology is not None
    assert topology.affinity["GPU1"].numa_affinity == "0-1"
    assert worst_gpu_link(topology) == "PHB"


def test_link_rank_order() -> None:
    ordered = ["X", "NV4", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC", "???"]
    ranks = [link_rank(link) for link in ordered]
    assert ranks == sorted(ranks)
    assert link_rank("NV4") == link_rank("NV18")
    assert link_rank("SOC") == link_rank("SYS")
    assert link_rank("???") > link_rank("SYS")


def test_unknown_device_raises_key_error() -> None:
    topology = parse_topology(_excerpt("2gpu-excerpt-from-rig-facts-pix"))
    assert topology is not None
    with pytest.raises(KeyError):
        link_class(topology, 0, 7)


@pytest.mark.parametrize(
    "text",
    ["", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."],
    ids=["empty", "driver-error"],
)
def test_no_matrix_gives_none(text: str) -> None:
    assert parse_topology(text) is None
    assert NvidiaTopology.default() is None
