"""Driver role: NVIDIA's CUDA repository, the open-module driver at the profile's exact version, pinned
and held, and nvidia-persistenced.

The repository, key, pin and hold decisions are written down in ``rigforge/operations/nvidia_apt.py``.
This role orders them: key and sources file, ``apt-get update`` only when one of them changed, the pin,
the removal of a driver the owner installed (only with ``--data replace_driver=true``:
``rigforge/operations/driver_takeover.py``), the driver install (which un-holds an older held release
first), the hold, persistenced. The driver install is boot-affecting: the new kernel module loads only
at the next boot, so the host layer's reboot step gets it as a trigger and, on its own, compares the
installed with the loaded driver.

DKMS builds the module for the kernels whose headers are installed: the role installs the headers of
the running kernel and of the kernel GRUB boots next (``rigforge/operations/kernel_module.py``), and
after the install builds the module for either one that still lacks it, so a kernel update without
headers never leaves the next boot without GPUs. A container host's running kernel is the machine's:
only a next-boot kernel of its own gets headers there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta
from pyinfra.facts.server import Arch, LinuxDistribution

from rigforge.checks.driver_takeover import REPLACE
from rigforge.context import current_profile
from rigforge.facts.kernel import NvidiaModuleKernels
from rigforge.facts.packages import DpkgPackages
from rigforge.operations import apt, driver_takeover, nvidia_apt
from rigforge.operations.driver_takeover import current_plan, recovery_line
from rigforge.operations.files import managed_file
from rigforge.operations.kernel_module import kernel_headers, nvidia_module_for_kernels
from rigforge.operations.missing_tool import service_unit
from rigforge.operations.nvidia_apt import RepoPlatform, cuda_repo_platform, driver_packages
from rigforge.operations.reboot import loaded_driver_version
from rigforge.profile import Profile
from rigforge.render import render

KEYRING = "/etc/apt/keyrings/rigforge-nvidia-cuda.gpg"
SOURCES_FILE = "/etc/apt/sources.list.d/rigforge-nvidia-cuda.sources"
PIN_FILE = "/etc/apt/preferences.d/rigforge-nvidia-driver.pref"

BootTrigger = tuple[OperationMeta, str]


@dataclass
class DriverChanges:
    """What later steps need from the driver role: reboot triggers, and ops that refreshed apt's lists."""

    boot_triggers: list[BootTrigger] = field(default_factory=list)
    refreshed_by: list[OperationMeta] = field(default_factory=list)


def host_platform() -> RepoPlatform:
    """The host's NVIDIA repository names, from os-release and ``uname -m`` (immutable facts)."""
    release = host.get_fact(LinuxDistribution)["release_meta"]
    return cuda_repo_platform(release.get("ID", ""), release.get("VERSION_ID", ""), host.get_fact(Arch))


def render_driver_files(profile: Profile, platform: RepoPlatform) -> dict[str, str]:
    """The repository sources file and the version pin: path -> content (nothing without a driver)."""
    if profile.driver is None:
        return {}
    return {
        SOURCES_FILE: render("apt/nvidia-cuda.sources.j2", profile, url=platform.fill(profile.driver.repo.url),
                             keyring=KEYRING, platform=platform),
        PIN_FILE: render("driver/nvidia-driver.pref.j2", profile, version=profile.driver.version),
    }


def driver_ready(profile: Profile) -> bool:
    """True when the profile's driver is installed and loaded already (read before this run changes it)."""
    if profile.driver is None:
        return False
    wanted = profile.driver.version
    installed = nvidia_apt.installed_driver_version(host.get_fact(DpkgPackages),
                                                    driver_packages(profile.driver.flavor))
    return installed == wanted and loaded_driver_version(host) == wanted


@deploy("NVIDIA driver")
def apply_driver(version: str | None = None) -> DriverChanges:
    """Install the profile's NVIDIA driver from NVIDIA's repository, pinned and held.

    + version: install this version instead of the profile's (a rollback to the recorded one)
    """
    profile = current_profile()
    if profile.driver is None:
        return DriverChanges()
    if version is not None:
        profile = profile.model_copy(update={"driver": profile.driver.model_copy(update={"version": version})})
    driver = profile.driver
    assert driver is not None
    platform = host_platform()
    rendered = render_driver_files(profile, platform)
    packages = driver_packages(driver.flavor)
    key = nvidia_apt.signing_key(name="Install NVIDIA's repository key", key_url=platform.fill(driver.repo.key_url),
                                 keyring=KEYRING, fingerprint=driver.repo.key_fingerprint)
    sources = managed_file(name=f"Add NVIDIA's CUDA repository ({platform.distro}/{platform.arch})",
                           dest=SOURCES_FILE, content=rendered[SOURCES_FILE])
    managed_file(name=f"Pin the NVIDIA driver at {driver.version}", dest=PIN_FILE, content=rendered[PIN_FILE])
    refresh = apt.lists_updated(name="Refresh the package lists (repository changed)", triggers=[key, sources])
    # A driver the owner installed goes first (only with --data replace_driver=true: refuse_foreign_driver
    # stopped the host before any change otherwise); the install below says what is left should it fail.
    takeover = current_plan(profile)
    driver_takeover.foreign_driver_removed(name="Remove the driver the owner installed", profile=profile)
    if_it_fails = recovery_line(takeover, driver.version) if takeover.action == REPLACE else ""
    # DKMS builds the open kernel module against these (the running kernel's and the next boot's), so they
    # come before the driver, whose install builds it.
    headers = kernel_headers(host.get_fact(NvidiaModuleKernels))
    if headers:
        apt.packages(name="Install the headers of the kernels that need the NVIDIA module", packages=headers,
                     refreshed_by=[refresh])
    install = nvidia_apt.install_driver(name=f"Install the NVIDIA {driver.flavor} driver {driver.version}",
                                        packages=packages, version=driver.version, refreshed_by=[refresh],
                                        if_it_fails=if_it_fails)
    nvidia_apt.hold_at_version(name=f"{'Hold' if driver.hold else 'Release'} the driver packages at "
                                    f"{driver.version}", packages=packages, version=driver.version, hold=driver.hold)
    nvidia_module_for_kernels(name=f"Build the NVIDIA {driver.version} module for the running and next-boot kernels",
                              version=driver.version, packages=packages)
    # Started by the reboot when the new module is not loaded yet; started now when it is.
    service_unit(name="Enable nvidia-persistenced", service="nvidia-persistenced.service", enabled=True,
                 running=True if driver_ready(profile) else None)
    return DriverChanges(boot_triggers=[(install, f"the NVIDIA driver package ({driver.version})")],
                         refreshed_by=[refresh, install])
