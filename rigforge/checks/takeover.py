"""What is already there: one row per component the owner may have installed by hand, read before any change.

Each row is a pure function ``(Profile, InstalledFacts) -> list[Row]``: what was found, where it came
from, what rigforge will do about it and why. A row that would have rigforge remove or replace what the
owner installed, or start an engine that cannot have the GPUs or its port, is blocking for the layer
it belongs to: a deploy that changes that layer stops the host before any change.

    installed = gather_installed(host.get_fact, profile)
    rows = takeover_rows(profile, installed)
    for line in takeover_lines(rows): print(line)

A component is one function in ``ROWS``: Docker's row goes there beside the others.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rigforge.checks.table import render_table
from rigforge.docker_install import DockerRow, docker_install, docker_row
from rigforge.engines import UNIT_NAME
from rigforge.facts import LoadedDriver, NvidiaLoadedDriver
from rigforge.facts.docker import DockerEngine, DockerSetup
from rigforge.facts.holders import (
    DpkgLockHolders,
    GpuComputeProcesses,
    Holder,
    Holders,
    LockHolder,
    PortListeners,
    is_engine,
)
from rigforge.facts.installed import DPKG_STATUS, CudaInstall, CudaToolkits, DriverInstall, NvidiaDriverInstall
from rigforge.facts.packages import DpkgPackages, NvidiaSmiVersions, SmiVersions
from rigforge.known_failures import known_signatures
from rigforge.profile import Profile

HEADERS = ("component", "found", "from where", "rigforge will", "why")
MAX_WIDTHS = (14, 36, 34, 30, 70)
LAYERS = ("host", "container", "serving")
REPLACE = "replace (needs a switch; not yet supported)"
NVIDIA_REPO = "NVIDIA's CUDA repository"
RUNFILE = "NVIDIA's .run installer"
UNEXPLAINED = "a loaded module no installed package explains"
UNCONFIGURED = "an apt source no longer configured"
PORT_SIGNATURE = "llama-port-in-use"

#: Package names only NVIDIA's repository ships, and those only Ubuntu's archive ships (NNN: the branch).
_NVIDIA_ONLY = re.compile(r"^(nvidia-open(-\d+)?|cuda-drivers(-\d+)?|nvidia-driver-pinning-.*|nvidia-kernel-open-dkms"
                          r"|nvidia-driver-cuda)$")
_UBUNTU_ONLY = re.compile(r"^(nvidia-driver-\d+(-open|-server|-server-open)?|linux-modules-nvidia-\d+.*)$")
_NVIDIA_HOST = "developer.download.nvidia.com"
#: Driver package names that say the flavor (NVIDIA's, Debian's and Ubuntu's names).
_OPEN_NAMES = re.compile(r"^(nvidia-open(-\d+)?|nvidia-kernel-open-dkms|nvidia-open-kernel-dkms"
                         r"|nvidia-driver-\d+(-server)?-open|linux-modules-nvidia-\d+(-server)?-open-.*)$")
_PROPRIETARY_NAMES = re.compile(r"^(cuda-drivers(-\d+)?|nvidia-kernel-dkms|nvidia-driver-\d+(-server)?"
                                r"|linux-modules-nvidia-\d+(-server)?-(?!open-).*)$")


@dataclass(frozen=True)
class Row:
    """One line of the table.

    + component: `nvidia-driver`, `cuda`, `docker`, `gpu-process`, `engine-port`, `apt-lock`
    + found / source / action / why: the table's cells
    + blocking: a deploy that changes ``layer`` stops the host on it
    + layer: `host`, `container` or `serving`; "" for rows that only inform
    """

    component: str
    found: str
    source: str
    action: str
    why: str
    blocking: bool = False
    layer: str = ""

    def describe(self) -> str:
        """One line for the stop message: what blocks, and why."""
        return f"{self.component}: {self.found} ({self.source}): {self.action}: {self.why}"


@dataclass(frozen=True)
class InstalledFacts:
    """Everything the rows read, one fact each."""

    driver_install: DriverInstall
    loaded_driver: LoadedDriver | None
    smi: SmiVersions | None
    cuda: CudaInstall
    gpu_processes: Holders
    port_listeners: Holders
    lock_holders: tuple[LockHolder, ...]
    docker: DockerRow | None = None  # judged by rigforge/docker_install.py, as the container role judges it


def gather_installed(get_fact: Callable[..., Any], profile: Profile) -> InstalledFacts:
    """Read every fact the rows need with ``get_fact`` (pyinfra's ``host.get_fact``)."""
    docker = None
    if profile.container is not None:
        setup = get_fact(DockerSetup)
        docker = docker_row(docker_install(get_fact(DpkgPackages) or {}, setup), get_fact(DockerEngine), setup)
    return InstalledFacts(
        driver_install=get_fact(NvidiaDriverInstall), loaded_driver=get_fact(NvidiaLoadedDriver),
        smi=get_fact(NvidiaSmiVersions), cuda=get_fact(CudaToolkits), gpu_processes=get_fact(GpuComputeProcesses),
        port_listeners=get_fact(PortListeners, port=profile.engine.port), lock_holders=get_fact(DpkgLockHolders),
        docker=docker)


def _repo_prefix(profile: Profile) -> str:
    url = str(profile.driver.repo.url) if profile.driver else ""
    return re.split(r"\{|%7B", url, maxsplit=1)[0]


def package_source(name: str, origins: Sequence[str], repo_prefix: str) -> str:
    """Where an installed driver package came from: NVIDIA's repository, the distribution, or unknown."""
    urls = [origin for origin in origins if origin != DPKG_STATUS]
    if any(_NVIDIA_HOST in url or (repo_prefix and url.startswith(repo_prefix)) for url in urls):
        return NVIDIA_REPO
    if urls:
        return f"the distribution ({re.sub(r'^[a-z]+://', '', urls[0])})"
    if _NVIDIA_ONLY.match(name):
        return NVIDIA_REPO
    if _UBUNTU_ONLY.match(name):
        return "the distribution (Ubuntu)"
    return UNCONFIGURED


def driver_sources(profile: Profile, facts: InstalledFacts) -> dict[str, list[str]]:
    """{source: [what shows it]} for the driver on disk and in memory; empty when there is none."""
    install, prefix = facts.driver_install, _repo_prefix(profile)
    found = {name: package_source(name, package.origins, prefix) for name, package in install.packages.items()}
    # NVIDIA's repository also ships Debian's names (nvidia-driver, nvidia-kernel-dkms): one whose version no
    # source offers any more belongs with the NVIDIA packages of the same version.
    nvidia_versions = {install.packages[name].version for name, source in found.items() if source == NVIDIA_REPO}
    sources: dict[str, list[str]] = {}
    for name, package in sorted(install.packages.items()):
        source = NVIDIA_REPO if found[name] == UNCONFIGURED and package.version in nvidia_versions else found[name]
        sources.setdefault(source, []).append(f"{name} {package.version}")
    if install.runfile is not None:
        traces = [path for path, there in (("nvidia-uninstall", install.runfile.uninstaller),
                                           ("nvidia-installer.log", install.runfile.log)) if there]
        sources[RUNFILE] = traces
    if not sources and _found_driver(facts) is not None:
        sources[UNEXPLAINED] = [install.module.filename if install.module else
                                "/proc/driver/nvidia/version" if facts.loaded_driver else "nvidia-smi"]
    return sources


def _package_flavor(names: Sequence[str]) -> str:
    if any(_OPEN_NAMES.match(name) for name in names):
        return "open"
    return "proprietary" if any(_PROPRIETARY_NAMES.match(name) for name in names) else "?"


def _found_driver(facts: InstalledFacts) -> tuple[str, str] | None:
    """(version, flavor) of the driver: the loaded module first, then the module file, then nvidia-smi and the
    packages (whose names tell the flavor when no module does)."""
    loaded, module = facts.loaded_driver, facts.driver_install.module
    if loaded is not None:
        return loaded.version, "open" if loaded.open_kernel_module else "proprietary"
    if module is not None:
        return module.version, module.flavor
    packages = facts.driver_install.packages
    flavor = _package_flavor(list(packages))
    if facts.smi is not None and facts.smi.driver_version:
        return facts.smi.driver_version, flavor
    versions = sorted({package.version.split("-", 1)[0] for package in packages.values()})
    return (versions[-1], flavor) if versions else None


def driver_row(profile: Profile, facts: InstalledFacts) -> list[Row]:
    """The NVIDIA driver: version and flavor, where it came from, and keep / install / upgrade / replace."""
    found = _found_driver(facts)
    sources = driver_sources(profile, facts)
    found_text = f"{found[0]} ({found[1]})" if found else "none"
    source_text = "; ".join(f"{source}: {', '.join(items[:3])}" for source, items in sources.items()) or "-"
    if profile.driver is None:
        return [Row("nvidia-driver", found_text, source_text, "leave it", "the profile manages no driver")]
    wanted, flavor = profile.driver.version, profile.driver.flavor
    target = f"{wanted} ({flavor})"
    if found is None and not sources:
        return [Row("nvidia-driver", "none", "-", f"install {target}",
                    f"no driver found: the host layer installs it from {NVIDIA_REPO}", layer="host")]
    foreign = [source for source in sources if source != NVIDIA_REPO]
    if foreign:
        return [Row("nvidia-driver", found_text, source_text, REPLACE,
                    f"the profile's driver comes from {NVIDIA_REPO}; installed over a driver from "
                    f"{' and '.join(foreign)} it leaves two sets of libraries or lets apt remove what it decides",
                    blocking=True, layer="host")]
    if found is not None and found[1] not in (flavor, "?"):
        return [Row("nvidia-driver", found_text, source_text, REPLACE,
                    f"the profile asks for the {flavor} kernel modules: the {found[1]} packages must be purged first",
                    blocking=True, layer="host")]
    if found is not None and found[0] == wanted:
        return [Row("nvidia-driver", found_text, source_text, "keep", "already the profile's driver", layer="host")]
    return [Row("nvidia-driver", found_text, source_text, f"upgrade to {target}",
                "same source, another version: the host layer changes it and reboots once", layer="host")]


def _tree_source(tree: Any) -> str:
    if tree.packages:
        return f"packages ({', '.join(tree.packages[:2])}{', ...' if len(tree.packages) > 2 else ''})"
    return "runfile (cuda-uninstaller)" if tree.runfile else "no package owns it"


def cuda_row(profile: Profile, facts: InstalledFacts) -> list[Row]:
    """CUDA toolkits under /usr/local: packaged or runfile trees, and where /usr/local/cuda points."""
    cuda = facts.cuda
    link = f"/usr/local/cuda -> {cuda.link}" if cuda.link else "no /usr/local/cuda"
    found = "; ".join(tree.version for tree in cuda.trees) or "none"
    source = "; ".join(f"{tree.version}: {_tree_source(tree)}" for tree in cuda.trees) or "-"
    if profile.cuda is None:
        return [Row("cuda", f"{found}; {link}", source, "leave it", "the profile manages no CUDA toolkit")]
    wanted = profile.cuda.version
    same = next((tree for tree in cuda.trees if tree.version == wanted), None)
    others = [tree.version for tree in cuda.trees if tree.version != wanted]
    kept = f"; {', '.join(others)} left untouched" if others else ""
    beside = " beside the others" if others else ""
    if same is not None and not same.packages:
        return [Row("cuda", f"{found}; {link}", source, REPLACE,
                    f"apt would write cuda-toolkit-{wanted.replace('.', '-')} into {same.path}, a tree no package "
                    f"owns{kept}", blocking=True, layer="host")]
    if same is not None:
        return [Row("cuda", f"{found}; {link}", source, "keep", f"CUDA {wanted} installed from packages{kept}",
                    layer="host")]
    return [Row("cuda", f"{found}; {link}", source, f"install {wanted}",
                f"cuda-toolkit-{wanted.replace('.', '-')} from {NVIDIA_REPO}{beside}{kept}", layer="host")]


def _foreign(holders: Holders) -> list[Holder]:
    return [holder for holder in holders.holders if not is_engine(holder, UNIT_NAME, holders.engine_container_id)]


def _unit(holder: Holder) -> str:
    """The unit or scope a process runs in (the last part of its cgroup): what the owner stops."""
    return holder.cgroup.rstrip("/").rsplit("/", 1)[-1] or "-"


def _process(holder: Holder) -> str:
    return f"pid {holder.pid} ({holder.name})" if holder.pid else f"{holder.name} (pid unknown: ss needs root)"


def gpu_process_rows(profile: Profile, facts: InstalledFacts) -> list[Row]:
    """GPU processes rigforge did not start: a blocking row each, naming pid, process and memory."""
    foreign = _foreign(facts.gpu_processes)
    if not foreign:
        found = f"{len(facts.gpu_processes.holders)} of rigforge's engine" if facts.gpu_processes.holders else "none"
        return [Row("gpu-process", found, "-", "nothing", "no other process holds GPU memory", layer="serving")]
    return [Row("gpu-process", f"{_process(holder)}, {holder.used_mib or 0:.0f} MiB", _unit(holder),
                "blocked: the engine cannot start",
                f"it holds GPU memory the engine needs; stop it yourself (rigforge never stops an owner's process): "
                f"kill {holder.pid} or stop its service", blocking=True, layer="serving") for holder in foreign]


def port_rows(profile: Profile, facts: InstalledFacts) -> list[Row]:
    """The engine's port held by another process: a blocking row each (the known failure's fix)."""
    port = profile.engine.port
    foreign = _foreign(facts.port_listeners)
    if not foreign:
        found = "rigforge's engine" if facts.port_listeners.holders else "free"
        return [Row("engine-port", f"{port}: {found}", "-", "nothing", "the engine can listen on it", layer="serving")]
    signature = next(sig for sig in known_signatures() if sig.id == PORT_SIGNATURE)
    fix = signature.fix.replace("PORT", str(port))
    return [Row("engine-port", f"{port}: {_process(holder)} on {holder.address}", _unit(holder),
                "blocked: the engine cannot start", f"{signature.cause}; fix: {fix}", blocking=True, layer="serving")
            for holder in foreign]


def apt_lock_row(profile: Profile, facts: InstalledFacts) -> list[Row]:
    """Who holds apt/dpkg's frontend lock now (informational: unattended-upgrades after a boot)."""
    if not facts.lock_holders:
        return [Row("apt-lock", "free", "-", "nothing", "apt and dpkg can install now")]
    holders = ", ".join(f"{holder.command} (pid {holder.pid})" for holder in facts.lock_holders)
    return [Row("apt-lock", f"held by {holders}", "/var/lib/dpkg/lock-frontend", "wait for it",
                "apt cannot install while another process holds the lock; rigforge never kills it")]


def docker_rows(profile: Profile, facts: InstalledFacts) -> list[Row]:
    """Docker: which one, its containers and daemon.json keys, and what the container role will do with it."""
    if facts.docker is None:
        return [Row("docker", "-", "-", "leave it", "the profile manages no container runtime")]
    found = facts.docker
    return [Row("docker", found.found, found.source, found.action, found.why, found.blocking, layer="container")]


RowFunction = Callable[[Profile, InstalledFacts], list[Row]]

#: Table order.
ROWS: tuple[RowFunction, ...] = (driver_row, cuda_row, docker_rows, gpu_process_rows, port_rows, apt_lock_row)


def takeover_rows(profile: Profile, facts: InstalledFacts) -> list[Row]:
    """Every row, in table order."""
    return [row for function in ROWS for row in function(profile, facts)]


def blocking_rows(rows: Sequence[Row], layers: Sequence[str]) -> list[Row]:
    """The rows that stop a deploy changing ``layers``."""
    return [row for row in rows if row.blocking and row.layer in layers]


def takeover_lines(rows: Sequence[Row]) -> list[str]:
    """The table as lines: component | found | from where | rigforge will | why."""
    cells = [(row.component, row.found, row.source,
              f"{row.action} (blocking)" if row.blocking and "blocked" not in row.action else row.action,
              row.why) for row in rows]
    return render_table(HEADERS, cells, MAX_WIDTHS)
