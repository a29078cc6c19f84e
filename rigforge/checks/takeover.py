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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from rigforge.checks.docker_install import DockerRow, docker_install, docker_row
from rigforge.checks.driver_takeover import (
    INSTALL,
    KEEP,
    NVIDIA_REPO,
    REFUSE,
    REPLACE,
    SWITCH,
    UPGRADE,
    DriverFound,
    bystanders,
    plan_driver,
    read_driver_found,
)
from rigforge.checks.secure_boot import MODULE_WOULD_NOT_LOAD, judge_secure_boot
from rigforge.checks.table import render_table
from rigforge.checks.tradeoffs import tradeoffs
from rigforge.facts import LoadedDriver
from rigforge.facts.apt_simulation import AptPurgeSimulation, AptRemovals
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
from rigforge.facts.installed import CudaInstall, CudaToolkits, DriverInstall
from rigforge.facts.packages import DpkgPackages, SmiVersions
from rigforge.facts.secure_boot import SecureBoot, SecureBootStatus
from rigforge.known_failures import known_signatures
from rigforge.profile import Profile
from rigforge.recipes.choice import PROFILE_RECORD, RecipeChoice, RecipeState, recipe_cells
from rigforge.serving.engines import UNIT_NAME

HEADERS = ("component", "found", "from where", "rigforge will", "why")
MAX_WIDTHS = (14, 36, 34, 30, 70)
LAYERS = ("host", "container", "serving")
PORT_SIGNATURE = "llama-port-in-use"


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
    docker: DockerRow | None = None  # judged by rigforge/checks/docker_install.py, as the container role judges it
    driver_removals: AptRemovals | None = None  # apt's simulation of a driver replacement's purge
    switches: frozenset[str] = frozenset()  # the run's --data switches that are on (replace_driver)
    secure_boot: SecureBootStatus | None = None
    recipe_state: RecipeState | None = None  # what the rig records of its engine recipe
    recipe_choice: RecipeChoice | None = None  # the recipe this run gives it

    @property
    def driver(self) -> DriverFound:
        return DriverFound(install=self.driver_install, loaded=self.loaded_driver, smi=self.smi)


def gather_installed(get_fact: Callable[..., Any], profile: Profile, switches: frozenset[str] = frozenset(),
                     recipe: tuple[RecipeState, RecipeChoice] | None = None) -> InstalledFacts:
    """Read every fact the rows need with ``get_fact`` (pyinfra's ``host.get_fact``); ``switches``: the run's;
    ``recipe``: what the rig records of its engine recipe and the recipe this run gives it."""
    docker = None
    if profile.container is not None:
        setup = get_fact(DockerSetup)
        docker = docker_row(docker_install(get_fact(DpkgPackages) or {}, setup), get_fact(DockerEngine), setup)
    found = read_driver_found(get_fact)
    plan = plan_driver(profile, found)
    removals = get_fact(AptPurgeSimulation, packages=plan.purge) if plan.purge else None
    return InstalledFacts(
        driver_install=found.install, loaded_driver=found.loaded, smi=found.smi, cuda=get_fact(CudaToolkits),
        gpu_processes=get_fact(GpuComputeProcesses), port_listeners=get_fact(PortListeners, port=profile.engine.port),
        lock_holders=get_fact(DpkgLockHolders), docker=docker, driver_removals=removals, switches=switches,
        secure_boot=get_fact(SecureBoot), recipe_state=recipe[0] if recipe else None,
        recipe_choice=recipe[1] if recipe else None)


def driver_row(profile: Profile, facts: InstalledFacts) -> list[Row]:
    """The NVIDIA driver: version and flavor, where it came from, and keep / install / upgrade / replace."""
    plan = plan_driver(profile, facts.driver)
    found_text = f"{plan.found[0]} ({plan.found[1]})" if plan.found else "none"
    source_text = "; ".join(f"{source}: {', '.join(items[:3])}" for source, items in plan.sources.items()) or "-"
    if others := bystanders(facts.driver):  # found by name, but owning no file of the driver's module
        source_text += f"; not the driver: {', '.join(others)}"
    row = partial(Row, "nvidia-driver", found_text, source_text)
    if profile.driver is None:
        return [row("leave it", plan.why)]
    target = f"{profile.driver.version} ({profile.driver.flavor})"
    if plan.action == REFUSE:
        return [row("blocked: rigforge cannot replace it", plan.why, blocking=True, layer="host")]
    if plan.action != REPLACE:
        action = {INSTALL: f"install {target}", KEEP: "keep", UPGRADE: f"upgrade to {target}"}[plan.action]
        return [row(action, plan.why, layer="host")]
    removals = facts.driver_removals
    if removals is not None and removals.errors:
        return [row("blocked: apt cannot plan the purge", f"apt-get -s purge {' '.join(plan.purge)}: "
                    f"{'; '.join(removals.errors)}", blocking=True, layer="host")]
    removed = removals.names if removals is not None else []
    purge = f"; apt would purge {len(removed)} packages: {', '.join(removed)}" if removed else ""
    if SWITCH in facts.switches:
        return [row(f"replace: {plan.removal_text()}, then install {target}", f"{plan.why}{purge}", layer="host")]
    return [row(f"replace, with --data {SWITCH}=true", f"{plan.why}; it would run {plan.removal_text()}{purge}",
                blocking=True, layer="host")]


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
        uninstall = f"{same.path}/bin/cuda-uninstaller" if same.runfile else "its installer"
        return [Row("cuda", f"{found}; {link}", source, "blocked: apt would write over it",
                    f"apt would write cuda-toolkit-{wanted.replace('.', '-')} into {same.path}, a tree no package "
                    f"owns: remove it with {uninstall} or move it aside{kept}", blocking=True, layer="host")]
    if same is not None:
        return [Row("cuda", f"{found}; {link}", source, "keep", f"CUDA {wanted} installed from packages{kept}",
                    layer="host")]
    return [Row("cuda", f"{found}; {link}", source, f"install {wanted}",
                f"cuda-toolkit-{wanted.replace('.', '-')} from {NVIDIA_REPO}{beside}{kept}", layer="host")]


def secure_boot_row(profile: Profile, facts: InstalledFacts) -> list[Row]:
    """Secure Boot, and whether DKMS's signing key is enrolled: blocking for the host layer when the module DKMS
    signs for the profile's driver would not load (the same judgement as the preflight's row)."""
    if facts.secure_boot is None:
        return [Row("secure-boot", "not read", "-", "nothing", "")]
    check = judge_secure_boot(facts.secure_boot)
    row = partial(Row, "secure-boot", check.found, "mokutil" if facts.secure_boot.mokutil else "EFI variables")
    if profile.driver is None:
        return [row("nothing", "the profile installs no driver: no module to sign")]
    if check.verdict == "fail":
        return [row("blocked: no driver change or reboot", f"{MODULE_WOULD_NOT_LOAD}; fix: {check.fix}",
                    blocking=True, layer="host")]
    if check.verdict == "ok":
        return [row("nothing", "the module DKMS builds will load", layer="host")]
    return [row("nothing; check it", check.fix, layer="host")]


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


def tradeoff_rows(profile: Profile, facts: InstalledFacts) -> list[Row]:
    """The safe defaults the profile gives up (rigforge/checks/tradeoffs.py): never blocking, the owner decides."""
    return [Row("trade-off", item.setting, item.source, "apply it, as the profile says",
                f"gives up {item.gives_up}; to keep the safe default: {item.safe_default}")
            for item in tradeoffs(profile)]


RowFunction = Callable[[Profile, InstalledFacts], list[Row]]

def recipe_row(profile: Profile, facts: InstalledFacts) -> list[Row]:
    """The engine recipe: the one the rig records, and the one it runs after this run (never blocking)."""
    del profile
    if facts.recipe_choice is None or facts.recipe_choice.name is None or facts.recipe_state is None:
        return []
    found, action, why = recipe_cells(facts.recipe_choice, facts.recipe_state)
    return [Row("recipe", found, PROFILE_RECORD, action, why)]


#: Table order.
ROWS: tuple[RowFunction, ...] = (driver_row, cuda_row, secure_boot_row, docker_rows, gpu_process_rows, port_rows,
                                 apt_lock_row, tradeoff_rows, recipe_row)


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
