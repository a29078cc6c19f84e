"""What the driver role promises: NVIDIA's repository with its key, the driver at the profile's version,
pinned and held, loaded (= installed), nvidia-persistenced running, no reboot left pending.

The loaded-driver check reads /proc/driver/nvidia/version, else ``nvidia-smi --version`` (the same
facts the reboot step uses); GPU-only checks skip on hosts without GPUs, saying so.
"""

from __future__ import annotations

import pytest

from rigforge.facts.driver import NvidiaLoadedDriver
from rigforge.facts.packages import DpkgPackages, KeyringFingerprints, NvidiaSmiVersions
from rigforge.operations.nvidia_apt import cuda_repo_platform, driver_packages, installed_driver_version
from rigforge.operations.reboot import PENDING_FILE
from rigforge.profile import Driver, Profile
from roles.driver import KEYRING, render_driver_files


def _fact(host, fact_class, **kwargs):  # noqa: ANN001, ANN202 - testinfra host, any fact
    fact = fact_class()
    return fact.process(host.run(fact.command(**kwargs)).stdout.splitlines())


@pytest.fixture(scope="module")
def driver(profile: Profile) -> Driver:
    if profile.driver is None:
        pytest.skip(f"profile {profile.name} installs no NVIDIA driver")
    return profile.driver


def test_repository_files_are_the_profiles(host, profile: Profile, driver: Driver) -> None:
    info = host.system_info
    platform = cuda_repo_platform(info.distribution, info.release, info.arch)
    for path, content in render_driver_files(profile, platform).items():
        assert host.file(path).content_string == content, f"{path} differs from what the profile renders"


def test_repository_key(host, driver: Driver) -> None:
    fingerprints = _fact(host, KeyringFingerprints, path=KEYRING)
    assert fingerprints, f"{KEYRING} is missing or not a binary keyring"
    if driver.repo.key_fingerprint:
        assert driver.repo.key_fingerprint in fingerprints


def test_driver_installed_at_the_profile_version_and_held(host, driver: Driver) -> None:
    installed = _fact(host, DpkgPackages)
    packages = driver_packages(driver.flavor)
    assert installed_driver_version(installed, packages) == driver.version
    for name in packages:
        assert installed[name].held == driver.hold, f"{name} hold is {installed[name].held}, profile says {driver.hold}"


def test_loaded_driver_is_the_installed_one(host, driver: Driver) -> None:
    loaded = _fact(host, NvidiaLoadedDriver)
    version = loaded.version if loaded else None
    if version is None:
        smi = _fact(host, NvidiaSmiVersions)
        if smi is None:
            pytest.skip("neither /proc/driver/nvidia/version nor nvidia-smi: no driver to compare")
        version = smi.driver_version
        assert version, f"nvidia-smi cannot read the loaded driver: {smi.error} (reboot pending?)"
    assert version == driver.version


def test_persistenced_runs(host, driver: Driver) -> None:
    service = host.service("nvidia-persistenced")
    assert service.is_enabled and service.is_running


def test_no_reboot_pending(host) -> None:
    pending = host.file(PENDING_FILE)
    assert not pending.exists, f"a reboot is still pending because: {pending.content_string.strip()}"


def test_every_gpu_is_visible(host, profile: Profile, needs_gpu: None) -> None:
    listed = [line for line in host.check_output("nvidia-smi -L").splitlines() if line.startswith("GPU ")]
    assert profile.gpus is not None and len(listed) == profile.gpus.count
