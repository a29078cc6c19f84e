"""The host-layer facts (rigforge/facts/packages.py) on real captured outputs (tests/fixtures/host)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rigforge.facts.packages import (
    BootEnvironment,
    BootTools,
    DpkgPackages,
    InstalledPackage,
    KeyringFingerprints,
    NvidiaSmiVersions,
    compare_debian_versions,
    keyring_fingerprints,
    parse_boot_tools,
    parse_smi_version,
    upstream_version,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
H200 = FIXTURES / "host" / "nvidia-h200-x2"
SANDBOX = FIXTURES / "host" / "sandbox-debian12"
H100_SMI_VERSION = FIXTURES / "gpu" / "nvidia-h100-x1" / "nvidia-smi-version.txt"


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_dpkg_packages_with_holds_on_the_h200_machine() -> None:
    packages = DpkgPackages().process(_lines(H200 / "fact-DpkgPackages.txt"))
    assert packages["libnccl2"] == InstalledPackage(version="2.28.3-1+cuda13.0", held=True)
    assert packages["cuda-nvcc-13-0"] == InstalledPackage(version="13.0.88-1", held=False)
    assert packages["cuda-compat-13-0"].version == "580.95.05-0ubuntu1"
    held = sorted(name for name, package in packages.items() if package.held)
    assert held == ["libcublas-13-0", "libcublas-dev-13-0", "libcudnn9-cuda-13", "libnccl-dev", "libnccl2"]
    assert len(packages) > 400


def test_dpkg_packages_on_the_sandbox_after_the_driver_role() -> None:
    packages = DpkgPackages().process(_lines(SANDBOX / "fact-DpkgPackages.txt"))
    assert packages["nvidia-open"] == InstalledPackage("595.45.04-1", held=True)
    assert not packages["cuda-toolkit-13-2"].held
    assert DpkgPackages.default() == {}


def test_dpkg_status_that_is_not_installed_is_left_out() -> None:
    text = "kept\t1.0-1\tii \nremoved\t2.0-1\trc \nhalf\t3.0\tiU \nheld\t4.0\thi "
    assert sorted(DpkgPackages().process(text.splitlines())) == ["held", "kept"]


@pytest.mark.parametrize(("version", "upstream"), [
    ("595.45.04-1", "595.45.04"),
    ("595.58.03-1ubuntu1", "595.58.03"),
    ("1:7.7+1ubuntu8.1", "7.7+1ubuntu8.1"),
    ("2.28.3-1+cuda13.0", "2.28.3"),
    ("3.134", "3.134"),
])
def test_upstream_version(version: str, upstream: str) -> None:
    assert upstream_version(version) == upstream


VERSION_PAIRS = [
    ("590.48.01-1", "595.45.04-1"),
    ("595.45.04-1", "595.45.04-1ubuntu1"),
    ("1.0~rc1-1", "1.0-1"),
    ("1:1.0-1", "2.0-1"),
    ("2.28.3-1+cuda13.0", "2.28.3-1+cuda12.9"),
    ("13.2.51-1", "13.2.9-1"),
    ("1.0a", "1.0+"),
    ("1.0", "1.0-0"),
]


@pytest.mark.parametrize(("left", "right"), VERSION_PAIRS)
def test_version_order_matches_dpkg(left: str, right: str) -> None:
    ours = compare_debian_versions(left, right)
    assert compare_debian_versions(right, left) == -ours
    if shutil.which("dpkg") is None:
        pytest.skip("dpkg not installed here: only the symmetric check ran")
    # The real tool is the reference.
    less = subprocess.run(["dpkg", "--compare-versions", left, "lt", right], check=False).returncode == 0
    equal = subprocess.run(["dpkg", "--compare-versions", left, "eq", right], check=False).returncode == 0
    assert ours == (0 if equal else -1 if less else 1)


def test_boot_environment_in_container_hosts() -> None:
    sandbox = BootEnvironment().process(_lines(SANDBOX / "fact-BootEnvironment.txt"))
    assert sandbox == BootTools(container="docker", update_grub=True, update_initramfs=True)
    h200 = BootEnvironment().process(_lines(H200 / "fact-BootEnvironment.txt"))
    assert h200 == BootTools(container="docker", update_grub=False, update_initramfs=False)


def test_boot_environment_on_a_machine() -> None:
    # Written in the command's layout: systemd-detect-virt prints "none" (and exits 1) off containers.
    tools = parse_boot_tools("none\n## tools\n/usr/sbin/update-grub\n/usr/sbin/update-initramfs\n")
    assert tools == BootTools(container=None, update_grub=True, update_initramfs=True)


@pytest.mark.parametrize(("keyring", "colons"), [
    (H200 / "ubuntu-archive-keyring.gpg", H200 / "ubuntu-archive-keyring.gpg.colons"),
    (SANDBOX / "debian-archive-bookworm-stable.gpg", SANDBOX / "debian-archive-bookworm-stable.gpg.colons"),
])
def test_keyring_fingerprints_match_gpg(keyring: Path, colons: Path) -> None:
    # RSA (Ubuntu) and ed25519 (Debian) keys; gpg's own primary-key fingerprints are the reference.
    lines = colons.read_text().splitlines()
    expected = tuple(line.split(":")[9] for previous, line in zip(lines, lines[1:], strict=False)
                     if previous.startswith("pub:") and line.startswith("fpr:"))
    assert expected and keyring_fingerprints(keyring.read_bytes()) == expected


def test_keyring_fact_reads_base64_and_rejects_garbage(tmp_path: Path) -> None:
    import base64

    data = (SANDBOX / "debian-archive-bookworm-stable.gpg").read_bytes()
    fact = KeyringFingerprints()
    assert fact.process([base64.b64encode(data).decode()]) == ("4D64FEC119C2029067D6E791F8D2585B8783D481",)
    assert fact.process([]) is None
    assert fact.process(["not base64 at all!"]) is None
    assert fact.process([base64.b64encode(b"-----BEGIN PGP PUBLIC KEY BLOCK-----").decode()]) is None
    assert "base64 -w0 /etc/apt/keyrings/x.gpg" in fact.command(path="/etc/apt/keyrings/x.gpg")


def test_smi_versions_on_real_and_standin_output() -> None:
    real = NvidiaSmiVersions().process(_lines(H100_SMI_VERSION))
    assert real is not None and (real.smi_version, real.driver_version, real.error) == ("580.159.04", "580.159.04",
                                                                                         None)
    h200 = NvidiaSmiVersions().process(_lines(H200 / "fact-NvidiaSmiVersions.txt"))
    assert h200 is not None and h200.driver_version == "580.159.04"
    standin = NvidiaSmiVersions().process(_lines(SANDBOX / "fact-NvidiaSmiVersions-standin.txt"))
    assert standin is not None and standin.driver_version == "595.45.04"


def test_smi_versions_when_the_driver_does_not_answer() -> None:
    assert parse_smi_version("") is None
    # After an upgrade without reboot nvidia-smi prints its own version and NVML's complaint.
    mismatch = parse_smi_version("NVIDIA-SMI version  : 595.45.04\nFailed to initialize NVML: "
                                 "Driver/library version mismatch\nNVML library version: 595.45\n")
    assert mismatch is not None and mismatch.driver_version is None and mismatch.smi_version == "595.45.04"
    assert mismatch.error == "Failed to initialize NVML: Driver/library version mismatch"


def test_fact_commands_run_here_through_pyinfra() -> None:
    """The real commands, run by pyinfra's @local connector on this machine: they exit 0 and parse."""
    from pyinfra.api import Config, Inventory, State
    from pyinfra.api.connect import connect_all
    from pyinfra.api.facts import get_facts

    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)

    def fact(cls: type, **kwargs: object) -> object:
        (value,) = get_facts(state, cls, kwargs=kwargs).values()
        return value

    assert isinstance(fact(BootEnvironment), BootTools)
    packages = fact(DpkgPackages)
    assert isinstance(packages, dict) and (not shutil.which("dpkg-query") or "dpkg" in packages)
    assert fact(KeyringFingerprints, path="/nonexistent/keyring.gpg") is None
    smi = fact(NvidiaSmiVersions)
    assert smi is None or smi.smi_version
