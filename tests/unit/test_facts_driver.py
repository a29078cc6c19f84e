"""Loaded driver version, /proc/driver/nvidia/params and nvidia_uvm parameters on real captures."""

from __future__ import annotations

from pathlib import Path

import pytest

from rigforge.facts.driver import (
    LoadedDriver,
    NvidiaDriverParams,
    NvidiaLoadedDriver,
    NvidiaUvmParams,
    module_param_enabled,
    parse_driver_params,
    parse_driver_version,
    parse_registry_dwords,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
CAPTURES = sorted(path for path in FIXTURES.iterdir() if (path / "manifest.tsv").exists())


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_loaded_driver_matches_nvidia_smi(capture: Path) -> None:
    lines = (capture / "proc-driver-nvidia-version.txt").read_text().splitlines()
    driver = NvidiaLoadedDriver().process(lines)
    smi_version = (capture / "nvidia-smi-version.txt").read_text()
    assert driver == LoadedDriver(version="580.159.04", open_kernel_module=True)
    assert f"DRIVER version      : {driver.version}" in smi_version


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # Published examples of the other formats (not captured here).
        (
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024",
            LoadedDriver("550.54.14", open_kernel_module=False),
        ),
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.65.06  Release Build",
            LoadedDriver("580.65.06", open_kernel_module=True),
        ),
        (
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  418.56  Fri Mar 15 12:59:26 CDT 2019",
            LoadedDriver("418.56", open_kernel_module=False),
        ),
    ],
)
def test_other_version_formats(line: str, expected: LoadedDriver) -> None:
    assert parse_driver_version(line) == expected


def test_driver_not_loaded() -> None:
    assert NvidiaLoadedDriver.default() is None
    assert parse_driver_version("") is None
    assert parse_driver_version("GCC version:  gcc version 15.3.0 (GCC)") is None


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_params_real(capture: Path) -> None:
    text = (capture / "proc-driver-nvidia-params.txt").read_text()
    params = NvidiaDriverParams().process(text.splitlines())
    assert params is not None
    assert len(params) == len(text.splitlines())
    assert params["RegistryDwords"] == ""
    assert params["EnableResizableBar"] == "0"
    assert params["DmaRemapPeerMmio"] == "1"
    assert params["GrdmaPciTopoCheckOverride"] == "0"
    assert params["DynamicPowerManagement"] == "3"
    assert params["ResmanDebugLevel"] == "4294967295"


def test_params_show_nvlink_difference_between_machines() -> None:
    single = parse_driver_params((FIXTURES / "nvidia-h100-x1" / "proc-driver-nvidia-params.txt").read_text())
    pair = parse_driver_params((FIXTURES / "nvidia-h200-x2" / "proc-driver-nvidia-params.txt").read_text())
    assert (single["NvLinkDisable"], pair["NvLinkDisable"]) == ("1", "0")


def test_registry_dwords_of_p2p_override() -> None:
    # The NVreg_RegistryDwords string of rig-facts section 1.5, as params shows it (quoted).
    line = (
        'RegistryDwords: "ForceP2P=0x11;RMForceP2PType=1;RMPcieP2PType=2;'
        'GrdmaPciTopoCheckOverride=1;EnableResizableBar=1"'
    )
    params = parse_driver_params(line)
    assert parse_registry_dwords(params["RegistryDwords"]) == {
        "ForceP2P": "0x11",
        "RMForceP2PType": "1",
        "RMPcieP2PType": "2",
        "GrdmaPciTopoCheckOverride": "1",
        "EnableResizableBar": "1",
    }
    assert parse_registry_dwords("") == {}


def test_params_absent() -> None:
    assert NvidiaDriverParams.default() is None
    assert NvidiaDriverParams().process([""]) is None


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_uvm_params_real(capture: Path) -> None:
    params = NvidiaUvmParams().process((capture / "fact-NvidiaUvmParams.txt").read_text().splitlines())
    listed = (capture / "ls-sys-module-nvidia_uvm-parameters.txt").read_text().split()
    assert params is not None
    assert sorted(params) == sorted(listed)
    assert params["uvm_disable_hmm"] == (capture / "uvm_disable_hmm.txt").read_text().strip() == "N"
    assert not module_param_enabled(params["uvm_disable_hmm"])
    assert params["uvm_page_table_location"] == "(null)"
    assert params["uvm_peer_copy"] == "phys"


def test_uvm_absent() -> None:
    assert NvidiaUvmParams.default() is None


@pytest.mark.parametrize(("value", "enabled"), [("Y", True), ("1", True), ("N", False), ("0", False), (None, False)])
def test_module_param_enabled(value: str | None, enabled: bool) -> None:
    assert module_param_enabled(value) is enabled
