"""NvidiaPciGpus / parse_pci_gpus on real lspci and sysfs output from the H200 machine.

Real inputs: tests/fixtures/gpu/nvidia-h200-x2/lspci-vvv.txt (plain `lspci -vvv`), and the fact's own
command captured on the same kind of machine in tests/fixtures/device-run/facts (with lspci: `-D -nn
-vvv -d 10de:` plus sysfs; without lspci: sysfs alone).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rigforge.facts import NvidiaPciGpus, PciGpuReport
from rigforge.facts.pci_gpus import (
    KNOWN_GPUS,
    link_generation,
    parse_lspci_gpus,
    parse_pci_gpus,
    parse_sysfs_gpus,
    pci_address,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LSPCI_VVV = FIXTURES / "gpu" / "nvidia-h200-x2" / "lspci-vvv.txt"
FACT_WITH_LSPCI = FIXTURES / "device-run" / "facts" / "fact-NvidiaPciGpus.txt"
FACT_WITHOUT_LSPCI = FIXTURES / "device-run" / "facts" / "fact-NvidiaPciGpus-without-lspci.txt"


def _h200_pair(report: PciGpuReport) -> None:
    assert [gpu.address for gpu in report.gpus] == ["0000:00:06.0", "0000:00:07.0"]
    for gpu in report.gpus:
        assert gpu.device_id == "10de:2335" and gpu.product == "NVIDIA H200" and gpu.identified
        # Region 2 [size=256G] is BAR1; nvidia-smi on the same machine reports 262144 MiB.
        assert gpu.bar1_mib == 262144
        assert (gpu.link_gen_max, gpu.link_width_max, gpu.link_gen_now, gpu.link_width_now) == (5, 16, 5, 16)


def test_plain_lspci_vvv_finds_both_h200s_among_virtio_devices() -> None:
    report = parse_pci_gpus(LSPCI_VVV.read_text())
    _h200_pair(report)
    assert report.lspci_found
    # Debian 12's pci.ids predates the H200: lspci prints the id in words, KNOWN_GPUS names it.
    assert report.gpus[0].name == "NVIDIA Corporation Device 2335"


@pytest.mark.parametrize("capture", [FACT_WITH_LSPCI, FACT_WITHOUT_LSPCI], ids=["lspci+sysfs", "sysfs-only"])
def test_fact_output_captured_on_the_gpu_machine(capture: Path) -> None:
    report = NvidiaPciGpus().process(capture.read_text().splitlines())
    _h200_pair(report)
    assert report.lspci_found is (capture == FACT_WITH_LSPCI)
    assert report.gpus[0].name == "NVIDIA Corporation Device 2335"


def test_lspci_and_sysfs_agree_on_the_same_machine() -> None:
    text = FACT_WITH_LSPCI.read_text()
    lspci_part, sysfs_part = text.split("## sysfs\n")
    assert parse_lspci_gpus(lspci_part) == parse_sysfs_gpus(sysfs_part)


def test_sysfs_fills_what_lspci_could_not_read() -> None:
    # lspci run as non-root hides the capabilities (real layout of that case); sysfs still has the link.
    lspci = ("0000:00:06.0 3D controller [0302]: NVIDIA Corporation Device [10de:2335] (rev a1)\n"
             "\tRegion 2: Memory at 100000000000 (64-bit, prefetchable) [size=256G]\n"
             "\tCapabilities: <access denied>\n")
    sysfs = FACT_WITHOUT_LSPCI.read_text().split("## sysfs\n")[1]
    (first, _second) = parse_pci_gpus(f"{lspci}## sysfs\n{sysfs}").gpus
    assert first.bar1_mib == 262144 and first.link_width_now == 16 and first.link_gen_max == 5


def test_named_gpus_small_bar_and_degraded_link() -> None:
    # Hand-written in lspci's layout with a current pci.ids: an RTX PRO 6000 with ReBAR off at x8,
    # an NVIDIA audio function (not a GPU) and a non-NVIDIA VGA device.
    text = (
        "0000:02:00.0 VGA compatible controller [0300]: ASPEED Technology, Inc. ASPEED Graphics Family "
        "[1a03:2000] (rev 52)\n"
        "\tRegion 0: Memory at f6000000 (32-bit, non-prefetchable) [size=16M]\n"
        "0000:38:00.0 3D controller [0302]: NVIDIA Corporation GB202GL [RTX PRO 6000 Blackwell Server "
        "Edition] [10de:2bb5] (rev a1)\n"
        "\tRegion 0: Memory at f2000000 (32-bit, non-prefetchable) [size=64M]\n"
        "\tRegion 1: Memory at 38000000000 (64-bit, prefetchable) [size=256M]\n"
        "\tRegion 3: Memory at 38010000000 (64-bit, prefetchable) [size=32M]\n"
        "\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported\n"
        "\t\tLnkSta:\tSpeed 2.5GT/s (downgraded), Width x8 (downgraded)\n"
        "\t\tLnkCap2: Supported Link Speeds: 2.5-32GT/s, Crosslink- Retimer+ 2Retimers+ DRS-\n"
        "0000:38:00.1 Audio device [0403]: NVIDIA Corporation Device [10de:22e8] (rev a1)\n"
    )
    (gpu,) = parse_lspci_gpus(text)
    assert gpu.address == "0000:38:00.0" and gpu.device_id == "10de:2bb5"
    assert gpu.name == "NVIDIA Corporation GB202GL [RTX PRO 6000 Blackwell Server Edition]"
    assert gpu.product == KNOWN_GPUS["10de:2bb5"]
    assert gpu.bar1_mib == 256
    assert (gpu.link_gen_max, gpu.link_width_max, gpu.link_gen_now, gpu.link_width_now) == (5, 16, 1, 8)


def test_unknown_id_is_not_identified() -> None:
    (gpu,) = parse_lspci_gpus("0000:01:00.0 3D controller [0302]: NVIDIA Corporation Device [10de:9999] (rev a1)\n")
    assert gpu.device_id == "10de:9999" and not gpu.identified and gpu.product == "NVIDIA Corporation Device 9999"


def test_helpers() -> None:
    assert pci_address("06:00.0") == "0000:06:00.0" and pci_address("0000:C1:00.0") == "0000:c1:00.0"
    assert [link_generation(speed) for speed in (2.5, 5, 8, 16, 32, 64, 3.0, None)] == [1, 2, 3, 4, 5, 6, None, None]


def test_no_gpu_and_empty_output() -> None:
    assert parse_pci_gpus("## sysfs").gpus == ()
    assert parse_pci_gpus("").gpus == ()
    assert NvidiaPciGpus.default() == PciGpuReport(gpus=(), lspci_found=False)
