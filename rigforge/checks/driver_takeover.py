"""The NVIDIA driver already on a rig, and what rigforge does with it: leave, install, keep, upgrade, replace
or refuse.

The profile's driver comes from NVIDIA's CUDA repository. Installed over a driver from anywhere else it
goes wrong in known ways: over the .run installer's files it leaves two sets of libraries ("Failed to
initialize NVML: Driver/library version mismatch"); over the distribution's packages (or NVIDIA's in the
other flavor) apt resolves the conflicts by removing whatever it decides. So such a driver is *replaced*,
and only when ``--data replace_driver=true`` asks for it: the .run installer's own ``nvidia-uninstall
--silent`` first, then ``apt-get purge`` of the foreign packages (apt's simulation of that purge is what the
table and the dry run show), then the profile's driver, one reboot as always. A loaded module that no
installed package or installer explains cannot be replaced by anything rigforge could run: refused.

One pure function, ``plan_driver``, decides; the takeover table's driver row (rigforge/checks/takeover.py)
and the driver role (roles/driver.py) both follow it, so the table says what the role does.

    plan = plan_driver(profile, read_driver_found(host.get_fact))
    if plan.action == REPLACE: ...
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rigforge.facts import LoadedDriver, NvidiaLoadedDriver
from rigforge.facts.installed import DPKG_STATUS, RUNFILE_UNINSTALLER, DriverInstall, NvidiaDriverInstall
from rigforge.facts.packages import NvidiaSmiVersions, SmiVersions
from rigforge.profile import Profile

SWITCH = "replace_driver"
NVIDIA_REPO = "NVIDIA's CUDA repository"
RUNFILE = "NVIDIA's .run installer"
UNEXPLAINED = "a loaded module no installed package explains"
UNCONFIGURED = "an apt source no longer configured"
#: A driver whose files are gone while its module stays loaded until the next boot: nothing left to remove.
REMOVED = "removed, loaded until the next boot"
#: A module loaded with no module file, package or installer trace here: the driver of the machine this system
#: runs in (a VM's host, a container's host); its libraries are that host's too, mounted in.
HOST = "the host (a VM or container: loaded, no module file here)"
#: Found by name or source package, yet owning no file of the driver: cuda-compat-X-Y is built from
#: nvidia-graphics-drivers-NNN but holds CUDA's forward-compatibility libraries under /usr/local/cuda-X.Y/compat.
_NEVER_THE_DRIVER = re.compile(r"^cuda-compat(-\d+)*$")

LEAVE, INSTALL, KEEP, UPGRADE, REPLACE, REFUSE = "leave", "install", "keep", "upgrade", "replace", "refuse"

#: Package names only NVIDIA's repository ships, and those only Ubuntu's archive ships (NNN: the branch).
_NVIDIA_ONLY = re.compile(r"^(nvidia-open(-\d+)?|cuda-drivers(-\d+)?|nvidia-driver-pinning-.*|nvidia-kernel-open-dkms"
                          r"|nvidia-driver-cuda)$")
_UBUNTU_ONLY = re.compile(r"^(nvidia-driver-\d+(-open|-server|-server-open)?|linux-modules-nvidia-\d+.*)$")
_NVIDIA_HOST = "developer.download.nvidia.com"
#: Driver package names that say the flavor (NVIDIA's, Debian's and Ubuntu's names).
_FLAVOR_NAMES = {
    "open": re.compile(r"^(nvidia-open(-\d+)?|nvidia-kernel-open-dkms|nvidia-open-kernel-dkms"
                       r"|nvidia-driver-\d+(-server)?-open|linux-modules-nvidia-\d+(-server)?-open-.*)$"),
    "proprietary": re.compile(r"^(cuda-drivers(-\d+)?|nvidia-kernel-dkms|nvidia-driver-\d+(-server)?"
                              r"|linux-modules-nvidia-\d+(-server)?-(?!open-).*)$"),
}


@dataclass(frozen=True)
class DriverFound:
    """The three facts that say which driver is there: on disk, in memory, and nvidia-smi's view."""

    install: DriverInstall
    loaded: LoadedDriver | None
    smi: SmiVersions | None

    @property
    def has_module_file(self) -> bool:
        """A module file of the driver is on this system (modinfo, or found under /lib/modules)."""
        return bool(self.install.files.modules) or self.install.module is not None


def driver_packages(found: DriverFound) -> list[str]:
    """The installed packages that are the driver: those owning its module files (``dpkg -S``; for a DKMS build,
    its source tree). With no module loaded and no module file, the driver packages found by name or source
    package, never ``cuda-compat``. A loaded module with no file here has no package at all."""
    if found.install.files.modules:
        owners = set(found.install.files.module_owners)
        return [name for name in sorted(found.install.packages) if name in owners]
    if found.loaded is not None or found.install.module is not None:
        owner = found.install.module.owner if found.install.module else ""
        return [owner] if owner in found.install.packages else []
    return [name for name in sorted(found.install.packages) if not _NEVER_THE_DRIVER.match(name)]


def bystanders(found: DriverFound) -> list[str]:
    """Packages found by name or source package that are not the driver (they own none of its module files)."""
    driver = set(driver_packages(found))
    return [f"{name} {package.version}" for name, package in sorted(found.install.packages.items())
            if name not in driver]


def read_driver_found(get_fact: Callable[..., Any]) -> DriverFound:
    """Read them with ``get_fact`` (pyinfra's ``host.get_fact``)."""
    return DriverFound(install=get_fact(NvidiaDriverInstall), loaded=get_fact(NvidiaLoadedDriver),
                       smi=get_fact(NvidiaSmiVersions))


@dataclass(frozen=True)
class DriverPlan:
    """What rigforge will do with the driver it found.

    + found: (version, flavor) of the driver there, None when there is none
    + sources: {where it came from: [packages or files that show it]}
    + action: ``leave``, ``install``, ``keep``, ``upgrade``, ``replace`` or ``refuse``
    + why: one sentence for the table
    + purge: the packages a replace purges (apt adds what depends on them: its simulation says)
    + uninstaller: the .run installer's ``nvidia-uninstall``, run first by a replace
    """

    found: tuple[str, str] | None
    sources: dict[str, list[str]]
    action: str
    why: str
    purge: tuple[str, ...] = ()
    uninstaller: str | None = None

    def removal_text(self) -> str:
        """``nvidia-uninstall --silent, then apt-get purge of 20 packages`` (what a replace runs first)."""
        steps = [f"{self.uninstaller} --silent"] if self.uninstaller else []
        if self.purge:
            steps.append(f"apt-get purge of {len(self.purge)} package{'s' if len(self.purge) > 1 else ''}")
        return ", then ".join(steps)


def repo_prefix(profile: Profile) -> str:
    """The profile's repository URL up to its first ``{placeholder}``: a package from there is NVIDIA's."""
    url = str(profile.driver.repo.url) if profile.driver else ""
    return re.split(r"\{|%7B", url, maxsplit=1)[0]


def package_source(name: str, origins: Sequence[str], prefix: str) -> str:
    """Where an installed driver package came from: NVIDIA's repository, the distribution, or unknown."""
    urls = [origin for origin in origins if origin != DPKG_STATUS]
    if any(_NVIDIA_HOST in url or (prefix and url.startswith(prefix)) for url in urls):
        return NVIDIA_REPO
    if urls:
        # The archive and suite, not the component: one driver's packages come from non-free, contrib and
        # non-free-firmware alike.
        where, _, suite = re.sub(r"^[a-z]+://", "", urls[0]).partition(" ")
        return f"the distribution ({where.rstrip('/')}{' ' + suite.split('/')[0] if suite else ''})"
    if _NVIDIA_ONLY.match(name):
        return NVIDIA_REPO
    if _UBUNTU_ONLY.match(name):
        return "the distribution (Ubuntu)"
    return UNCONFIGURED


def package_sources(profile: Profile, install: DriverInstall, names: Sequence[str] | None = None) -> dict[str, str]:
    """{package: where it came from} for every installed driver package (only ``names`` when given)."""
    prefix = repo_prefix(profile)
    found = {name: package_source(name, package.origins, prefix) for name, package in install.packages.items()
             if names is None or name in names}
    # NVIDIA's repository also ships Debian's names (nvidia-driver, nvidia-kernel-dkms): one whose version no
    # source offers any more belongs with the NVIDIA packages of the same version.
    nvidia_versions = {install.packages[name].version for name, source in found.items() if source == NVIDIA_REPO}
    return {name: NVIDIA_REPO if source == UNCONFIGURED and install.packages[name].version in nvidia_versions
            else source for name, source in sorted(found.items())}


def driver_sources(profile: Profile, found: DriverFound) -> dict[str, list[str]]:
    """{source: [what shows it]} for the driver on disk and in memory; empty when there is none."""
    sources: dict[str, list[str]] = {}
    for name, source in package_sources(profile, found.install, driver_packages(found)).items():
        sources.setdefault(source, []).append(f"{name} {found.install.packages[name].version}")
    runfile = found.install.runfile
    # The installer's log outlives nvidia-uninstall: only the uninstaller says its files are still there.
    if runfile is not None and runfile.uninstaller:
        sources[RUNFILE] = ["nvidia-uninstall"] + (["nvidia-installer.log"] if runfile.log else [])
    version, module = found_driver(found), found.install.module
    if sources or version is None:
        return sources
    if module is None and version[0] == found.install.replaced:
        sources[REMOVED] = [f"rigforge replaced {version[0]}"]
    elif module is None and runfile is not None:
        sources[REMOVED] = ["nvidia-uninstall ran (nvidia-installer.log is left)"]
    elif found.loaded is not None and not found.has_module_file:
        sources[HOST] = ["/proc/driver/nvidia/version"] + [
            f"{library.path} ({', '.join(library.owners) or 'no package'}"
            f"{', on ' + library.mount if library.mount not in ('', '/') else ''})"
            for library in found.install.files.libraries]
    else:
        files = found.install.files.modules
        sources[UNEXPLAINED] = [module.filename if module else files[0].path if files else
                                "/proc/driver/nvidia/version" if found.loaded else "nvidia-smi"]
    return sources


def package_flavor(names: Sequence[str]) -> str:
    """``open`` or ``proprietary`` when a package name says so, else ``?``."""
    for flavor, pattern in _FLAVOR_NAMES.items():
        if any(pattern.match(name) for name in names):
            return flavor
    return "?"


def found_driver(found: DriverFound) -> tuple[str, str] | None:
    """(version, flavor) of the driver: the loaded module first, then the module file, then nvidia-smi and the
    packages (whose names tell the flavor when no module does)."""
    loaded, module = found.loaded, found.install.module
    if loaded is not None:
        return loaded.version, "open" if loaded.open_kernel_module else "proprietary"
    if module is not None:
        return module.version, module.flavor
    packages = {name: found.install.packages[name] for name in driver_packages(found)}
    flavor = package_flavor(list(packages))
    if found.smi is not None and found.smi.driver_version:
        return found.smi.driver_version, flavor
    versions = sorted({package.version.split("-", 1)[0] for package in packages.values()})
    return (versions[-1], flavor) if versions else None


def plan_driver(profile: Profile, found: DriverFound) -> DriverPlan:
    """Decide what the host layer does with the driver there (pure)."""
    driver, sources, version = profile.driver, driver_sources(profile, found), found_driver(found)
    if driver is None:
        return DriverPlan(version, sources, LEAVE, "the profile manages no driver")
    if version is None and not sources:
        return DriverPlan(None, sources, INSTALL, f"no driver found: the host layer installs it from {NVIDIA_REPO}")
    if REMOVED in sources:
        return DriverPlan(version, sources, INSTALL, f"nothing of the old driver is left on disk: the host layer "
                                                     f"installs the profile's from {NVIDIA_REPO}")
    if HOST in sources:
        return DriverPlan(version, sources, REFUSE,
                          "the driver is the host's (this system runs in a VM or container): nothing here can "
                          "replace it; change it on the host, or run rigforge there")
    if UNEXPLAINED in sources:
        return DriverPlan(version, sources, REFUSE,
                          "nothing rigforge could run removes it (no package, no nvidia-uninstall): remove the "
                          "driver the way it was installed, or use a machine whose driver you manage")
    by_package = package_sources(profile, found.install, driver_packages(found))
    foreign = [name for name, source in by_package.items() if source != NVIDIA_REPO]
    other_flavor = "proprietary" if driver.flavor == "open" else "open"
    mismatched = [name for name, source in by_package.items()
                  if source == NVIDIA_REPO and _FLAVOR_NAMES[other_flavor].match(name)]
    uninstaller = RUNFILE_UNINSTALLER if RUNFILE in sources else None
    flavor_differs = version is not None and version[1] == other_flavor
    if foreign or uninstaller or mismatched or (flavor_differs and not by_package):
        origins = [source for source in sources if source != NVIDIA_REPO]
        why = (f"the profile's driver comes from {NVIDIA_REPO}; installed over a driver from "
               f"{' and '.join(origins)} it leaves two sets of libraries or lets apt remove what it decides"
               if origins else f"the profile asks for the {driver.flavor} kernel modules: the {other_flavor} "
               "packages must be purged first")
        if flavor_differs and not (foreign or uninstaller or mismatched):
            return DriverPlan(version, sources, REFUSE, why + "; no package of it is installed to purge")
        return DriverPlan(version, sources, REPLACE, why, purge=tuple(sorted({*foreign, *mismatched})),
                          uninstaller=uninstaller)
    if version is not None and version[0] == driver.version:
        return DriverPlan(version, sources, KEEP, "already the profile's driver")
    return DriverPlan(version, sources, UPGRADE, "same source, another version: the host layer changes it and "
                                                 "reboots once")
