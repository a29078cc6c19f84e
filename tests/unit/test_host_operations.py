"""The host layer's decisions as pure functions, and its shell pieces run for real on this machine."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from pyinfra.api import OperationError

from rigforge.facts.packages import DpkgPackages, keyring_fingerprints
from rigforge.operations.boot import grub_cmdline_check_script
from rigforge.operations.nvidia_apt import (
    RepoPlatform,
    cuda_repo_platform,
    driver_packages,
    installed_driver_version,
    key_install_script,
    packages_at_version,
)
from rigforge.operations.reboot import reboot_reasons
from rigforge.profile.loader import load_profile
from roles.boot import render_boot_files

SANDBOX_DPKG = Path(__file__).resolve().parents[1] / "fixtures" / "host" / "sandbox-debian12" / "fact-DpkgPackages.txt"


@pytest.mark.parametrize(("os_id", "version_id", "machine", "expected"), [
    ("ubuntu", "22.04", "x86_64", RepoPlatform("ubuntu2204", "x86_64")),
    ("ubuntu", "24.04", "x86_64", RepoPlatform("ubuntu2404", "x86_64")),
    ("debian", "12", "x86_64", RepoPlatform("debian12", "x86_64")),
    ("debian", "13", "aarch64", RepoPlatform("debian13", "sbsa")),
    ("Ubuntu", "24.04", "aarch64", RepoPlatform("ubuntu2404", "sbsa")),
])
def test_cuda_repo_platform(os_id: str, version_id: str, machine: str, expected: RepoPlatform) -> None:
    assert cuda_repo_platform(os_id, version_id, machine) == expected


def test_unsupported_platforms_say_what_is_supported() -> None:
    with pytest.raises(OperationError, match=r"no build for ubuntu 20.04; supported: ubuntu 22.04"):
        cuda_repo_platform("ubuntu", "20.04", "x86_64")
    with pytest.raises(OperationError, match=r"CPU 'ppc64le'"):
        cuda_repo_platform("debian", "12", "ppc64le")


def test_repo_urls_of_the_profile_are_filled_per_host() -> None:
    driver = load_profile("2x-pix").driver
    assert driver is not None
    platform = RepoPlatform("ubuntu2404", "sbsa")
    assert platform.fill(driver.repo.url) == "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/sbsa/"
    assert platform.fill(driver.repo.key_url).endswith("/ubuntu2404/sbsa/3bf863cc.pub")


def test_driver_package_naming_of_590_and_later() -> None:
    assert driver_packages("open") == ("nvidia-open",)
    assert driver_packages("proprietary") == ("cuda-drivers",)


def test_installed_driver_and_its_parts_from_dpkg() -> None:
    installed = DpkgPackages().process(SANDBOX_DPKG.read_text().splitlines())
    assert installed_driver_version(installed, ["nvidia-open"]) == "595.45.04"
    assert installed_driver_version(installed, ["cuda-drivers"]) is None
    assert packages_at_version(installed, "595.45.04") == [
        "nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-open", "nvidia-persistenced"]
    assert packages_at_version(installed, "590.48.01") == []


def test_reboot_reasons() -> None:
    assert reboot_reasons([], [], None, None) == []
    assert reboot_reasons([], [], "595.45.04", "595.45.04") == []
    assert reboot_reasons(["the GRUB drop-in", "the GRUB drop-in"], ["iommu=pt"], "595.45.04", "590.48.01") == [
        "the GRUB drop-in changed",
        "the running kernel command line lacks iommu=pt",
        "NVIDIA driver 595.45.04 is installed but 590.48.01 is loaded",
    ]
    assert reboot_reasons([], [], "595.45.04", None, "Failed to initialize NVML: Driver/library version mismatch") == [
        "NVIDIA driver 595.45.04 is installed but it is not loaded "
        "(nvidia-smi: Failed to initialize NVML: Driver/library version mismatch)"]


def _run_sh(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)


def test_grub_check_composes_the_command_line_like_grub_mkconfig(tmp_path: Path) -> None:
    profile = load_profile("2x-pix")
    (tmp_path / "grub.d").mkdir()
    # The distribution's file sets its own parameters; the drop-in appends the profile's.
    (tmp_path / "grub").write_text('GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX="console=ttyS0"\n')
    ((path, content),) = render_boot_files(profile).items()
    (tmp_path / "grub.d" / Path(path).name).write_text(content)
    ok = _run_sh(grub_cmdline_check_script(profile.boot.kernel_params, str(tmp_path)))
    assert ok.returncode == 0, ok.stderr
    assert "console=ttyS0 pci=noacs,realloc iommu=pt mitigations=off pcie_aspm=off pcie_port_pm=off quiet" in ok.stdout
    # A later drop-in that resets the line is caught before update-grub runs.
    (tmp_path / "grub.d" / "zz-local.cfg").write_text('GRUB_CMDLINE_LINUX="console=ttyS0"\n')
    bad = _run_sh(grub_cmdline_check_script(profile.boot.kernel_params, str(tmp_path)))
    assert bad.returncode == 1 and "lacks: pci=noacs,realloc iommu=pt" in bad.stderr
    assert _run_sh(grub_cmdline_check_script([], str(tmp_path))).returncode == 0


@pytest.fixture(scope="module")
def standin_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A freshly made stand-in signing key (armored) and its fingerprint."""
    if shutil.which("gpg") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("gpg and dpkg-deb are needed to make a stand-in key")
    from tests.standins.nvidia_cuda_repo import KEY_NAME, build_repo

    repo = build_repo(tmp_path_factory.mktemp("repo"))
    return next(repo.root.rglob(KEY_NAME)), repo.fingerprint


def test_key_install_checks_the_fingerprint(tmp_path: Path, standin_key: tuple[Path, str]) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is needed to fetch the key")
    key, fingerprint = standin_key
    keyring = tmp_path / "keyrings" / "rigforge-nvidia-cuda.gpg"
    wrong = _run_sh(key_install_script(f"file://{key}", str(keyring), "0" * 40))
    assert wrong.returncode == 1 and "does not have the pinned fingerprint" in wrong.stderr
    assert not keyring.exists() and not list(keyring.parent.iterdir())

    right = _run_sh(key_install_script(f"file://{key}", str(keyring), fingerprint))
    assert right.returncode == 0, right.stderr
    # The binary keyring apt's signed-by wants, holding exactly the pinned key; nothing left beside it.
    assert keyring_fingerprints(keyring.read_bytes()) == (fingerprint,)
    assert [p.name for p in keyring.parent.iterdir()] == [keyring.name]
    assert oct(keyring.stat().st_mode & 0o777) == "0o644"
