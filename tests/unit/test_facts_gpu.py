"""NvidiaGpus / parse_nvidia_smi_xml on real nvidia-smi output (tests/fixtures/gpu)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from rigforge.facts.gpu import (
    NO_NVIDIA_SMI,
    NvidiaGpus,
    normalize_bus_id,
    parse_compute_caps,
    parse_gpu_fact_output,
    parse_nvidia_smi_xml,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
CAPTURES = sorted(path for path in FIXTURES.iterdir() if (path / "manifest.tsv").exists())
RTX_PRO_6000_EXCERPT = FIXTURES / "nvidia-gpus-fact-excerpt-from-rig-facts-rtx-pro-6000.txt"


def _query_gpu_rows(capture: Path) -> list[dict[str, str]]:
    """The real `nvidia-smi --query-gpu=... --format=csv` capture, as a second opinion."""
    with (capture / "nvidia-smi-query-gpu.csv").open() as handle:
        reader = csv.DictReader(handle, skipinitialspace=True)
        return list(reader)


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_xml_agrees_with_query_gpu_csv(capture: Path) -> None:
    inventory = NvidiaGpus().process((capture / "fact-NvidiaGpus.txt").read_text().splitlines())
    rows = _query_gpu_rows(capture)

    assert inventory.smi_found and inventory.error is None and inventory.present
    assert len(inventory.gpus) == len(rows)
    for gpu, row in zip(inventory.gpus, rows, strict=True):
        assert gpu.index == int(row["index"])
        assert gpu.name == row["name"]
        assert gpu.bus_id == row["pci.bus_id"]
        assert gpu.compute_capability == row["compute_cap"]
        assert f"{gpu.memory_total_mib} MiB" == row["memory.total [MiB]"]
        assert inventory.driver_version == row["driver_version"]
        assert gpu.persistence_mode is (row["persistence_mode"] == "Enabled")
        assert f"{gpu.power_limit_enforced_w:.2f} W" == row["enforced.power.limit [W]"]
        assert f"{gpu.power_limit_default_w:.2f} W" == row["power.default_limit [W]"]
        assert f"{gpu.power_limit_max_w:.2f} W" == row["power.max_limit [W]"]
        assert gpu.pcie_gen_current == int(row["pcie.link.gen.current"])
        assert gpu.pcie_gen_max == int(row["pcie.link.gen.max"])
        assert gpu.pcie_width_current == int(row["pcie.link.width.current"])
        assert gpu.pcie_width_max == int(row["pcie.link.width.max"])


def test_h100_values() -> None:
    inventory = parse_gpu_fact_output((FIXTURES / "nvidia-h100-x1" / "fact-NvidiaGpus.txt").read_text())
    (gpu,) = inventory.gpus
    assert (inventory.driver_version, inventory.cuda_version) == ("580.159.04", "13.0")
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.architecture == "Hopper"
    assert gpu.memory_total_mib == 81559
    assert gpu.bar1_total_mib == 131072
    assert gpu.power_limit_min_w == 200.0
    assert gpu.uuid == "GPU-287c9c96-52a8-db2b-b039-11172f1b80b3"
    assert gpu.pci_address == "0000:00:06.0"


def test_h200_pair_values() -> None:
    inventory = parse_gpu_fact_output((FIXTURES / "nvidia-h200-x2" / "fact-NvidiaGpus.txt").read_text())
    assert [gpu.pci_address for gpu in inventory.gpus] == ["0000:00:06.0", "0000:00:07.0"]
    assert {gpu.memory_total_mib for gpu in inventory.gpus} == {143771}
    assert {gpu.bar1_total_mib for gpu in inventory.gpus} == {262144}


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_plain_xml_capture_has_no_compute_capability(capture: Path) -> None:
    # Why the fact also runs --query-gpu: the XML of driver 580 carries no compute capability.
    inventory = parse_nvidia_smi_xml((capture / "nvidia-smi-q-x.xml").read_text())
    assert inventory.gpus and all(gpu.compute_capability is None for gpu in inventory.gpus)
    caps = parse_compute_caps((capture / "nvidia-smi-query-compute-cap.csv").read_text())
    assert caps == {gpu.pci_address: "9.0" for gpu in inventory.gpus}


def test_rtx_pro_6000_excerpt() -> None:
    # Hand-written excerpt with rig-facts values (see fixtures README), not a capture.
    inventory = parse_gpu_fact_output(RTX_PRO_6000_EXCERPT.read_text())
    good, bad = inventory.gpus
    assert (inventory.driver_version, inventory.cuda_version) == ("595.58.03", "13.2")
    assert good.compute_capability == bad.compute_capability == "12.0"
    assert (good.memory_total_mib, good.bar1_total_mib, good.power_limit_enforced_w) == (97887, 131072, 600.0)
    assert (bad.bar1_total_mib, bad.persistence_mode, bad.power_limit_enforced_w) == (256, False, 300.0)
    assert (bad.pcie_gen_current, bad.pcie_width_current, bad.pcie_gen_max) == (1, 8, 5)
    assert good.uuid is None and good.power_limit_min_w is None


def test_pre_530_power_field_names() -> None:
    # Drivers before 530 wrote <power_readings><enforced_power_limit>; hand-written in that layout.
    xml = (
        "<?xml version='1.0' ?><nvidia_smi_log><driver_version>525.147.05</driver_version>"
        "<gpu id='00000000:3B:00.0'><product_name>NVIDIA A100-PCIE-40GB</product_name>"
        "<power_readings><power_limit>250.00 W</power_limit><enforced_power_limit>200.00 W"
        "</enforced_power_limit><default_power_limit>250.00 W</default_power_limit>"
        "<max_power_limit>250.00 W</max_power_limit></power_readings></gpu></nvidia_smi_log>"
    )
    (gpu,) = parse_nvidia_smi_xml(xml).gpus
    assert (gpu.power_limit_enforced_w, gpu.power_limit_default_w) == (200.0, 250.0)
    assert gpu.pci_address == "0000:3b:00.0"
    assert gpu.memory_total_mib is None


def test_absent_nvidia_smi_is_default() -> None:
    # pyinfra calls default() when the command prints nothing (no nvidia-smi on PATH).
    assert NvidiaGpus.default() is NO_NVIDIA_SMI
    assert not NO_NVIDIA_SMI.smi_found and not NO_NVIDIA_SMI.present


def test_driver_not_loaded_message_becomes_error() -> None:
    # nvidia-smi's message when the kernel module is missing, as it prints it on stdout.
    message = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running."
    )
    inventory = NvidiaGpus().process([message, "", "## compute_cap", message])
    assert inventory.smi_found and not inventory.present
    assert inventory.error == message


@pytest.mark.parametrize(
    "output",
    [["## compute_cap"], ["<?xml version='1.0' ?>", "<nvidia_smi_log><gpu>"]],
    ids=["nothing-before-marker", "truncated-xml"],
)
def test_unusable_output_never_raises(output: list[str]) -> None:
    inventory = NvidiaGpus().process(output)
    assert inventory.error and not inventory.gpus


def test_empty_xml_log_means_no_gpus() -> None:
    inventory = parse_nvidia_smi_xml("<nvidia_smi_log><attached_gpus>0</attached_gpus></nvidia_smi_log>")
    assert inventory.smi_found and inventory.error is None and not inventory.present


def test_compute_caps_skip_unknown_field_message() -> None:
    assert parse_compute_caps('Field "compute_cap" is not a valid field to query.') == {}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("00000000:18:00.0", "0000:18:00.0"), ("0000:AB:00.0", "0000:ab:00.0"), ("18:00.0", "18:00.0")],
)
def test_normalize_bus_id(raw: str, expected: str) -> None:
    assert normalize_bus_id(raw) == expected
