"""Which Docker a rig already has, and what rigforge does with it: pure functions over the Docker facts.

Debian 12's ``docker.io`` declares ``Conflicts: docker-ce, docker-ce-cli, docker-ce-rootless-extras`` and
depends on Debian's ``containerd``, which Docker's ``containerd.io`` conflicts with: apt can install
``docker.io`` on a rig with Docker CE only by removing Docker CE (apt 2.6 on Debian 12 gives up with an
error instead, checked on the stand-in packages). So rigforge installs ``docker.io`` only on a rig with
no Docker at all, uses Docker CE as it is (running or stopped), and never installs over anything else.
``docker_row`` is that decision as one row of the "what is already there" table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from rigforge.facts.docker import DockerOwnerSetup, EngineState

DockerKind = Literal["none", "docker.io", "docker-ce", "other"]

#: Docker's own packages (download.docker.com); docker.io conflicts with each, directly or through containerd.
DOCKER_CE_PACKAGES = ("docker-ce", "docker-ce-cli", "containerd.io", "docker-ce-rootless-extras")
#: Other packages that put an engine or a ``docker`` command on a rig (Microsoft's moby, Podman's shim,
#: Docker's pre-2017 package names).
OTHER_DOCKER_PACKAGES = ("moby-engine", "moby-cli", "podman-docker", "docker-engine", "docker-ee")
DISTRIBUTION_PACKAGE = "docker.io"


@dataclass(frozen=True)
class DockerInstall:
    """Which Docker is installed: its kind, the packages that say so (name: version), and the CLI's origin."""

    kind: DockerKind
    packages: tuple[tuple[str, str], ...]
    cli: str | None
    cli_package: str | None

    @property
    def package_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.packages)


def _versions(installed: Mapping[str, object], names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    return tuple((name, str(getattr(installed[name], "version", installed[name])))
                 for name in names if name in installed)


def docker_install(installed: Mapping[str, object], setup: DockerOwnerSetup) -> DockerInstall:
    """Decide the kind from dpkg's installed packages (``DpkgPackages``) and where ``docker`` comes from.

    Docker CE wins over ``docker.io`` when both show (a half-finished switch by hand): it is the one that
    must not be removed. A ``docker`` command no known package owns (a static binary under /usr/local) is
    ``other`` when no Docker package is installed; beside one, the package's engine is what counts.
    """
    found = {kind: _versions(installed, names) for kind, names in (
        ("docker-ce", DOCKER_CE_PACKAGES), ("other", OTHER_DOCKER_PACKAGES),
        ("docker.io", (DISTRIBUTION_PACKAGE,)))}
    known = set(DOCKER_CE_PACKAGES) | set(OTHER_DOCKER_PACKAGES) | {DISTRIBUTION_PACKAGE}
    unowned_cli = setup.cli is not None and setup.cli_package not in known
    kind: DockerKind = "none"
    for candidate in ("docker-ce", "other", "docker.io"):
        if found[candidate]:
            kind = candidate  # type: ignore[assignment] - one of the literal's values
            break
    if kind == "none" and unowned_cli:
        kind = "other"
    return DockerInstall(kind=kind, packages=found.get(kind, ()), cli=setup.cli, cli_package=setup.cli_package)


def replacing_would_block(install: DockerInstall, engine: EngineState) -> bool:
    """True when the role could only get an engine by installing ``docker.io`` over something else."""
    return install.kind == "other" and not (engine.answers and engine.cli is not None)


@dataclass(frozen=True)
class DockerRow:
    """One row of the "what is already there" table for Docker."""

    component: str
    found: str
    source: str
    action: str
    why: str
    blocking: bool


def _containers_text(setup: DockerOwnerSetup) -> str:
    if not setup.containers:
        return "no containers"
    gpu = [c.name for c in setup.containers if c.uses_gpus]
    text = f"{len(setup.containers)} containers ({len(setup.running)} running"
    return text + (f"; using GPUs: {', '.join(gpu)})" if gpu else ")")


def _engine_text(engine: EngineState) -> str:
    if engine.external:
        return f"engine {engine.server_version} answers, not run by this host's docker.service"
    if engine.answers:
        return f"engine {engine.server_version} running"
    return "engine not running"


def _daemon_text(setup: DockerOwnerSetup) -> str:
    if setup.daemon_keys is None:
        return "daemon.json is not valid JSON"
    owner_keys = [key for key in setup.daemon_keys if key != "runtimes"]
    return f"daemon.json keys: {', '.join(owner_keys)}" if owner_keys else "no daemon.json settings"


def docker_row(install: DockerInstall, engine: EngineState, setup: DockerOwnerSetup) -> DockerRow:
    """The Docker row: what is installed, from where, what rigforge will do with it and why."""
    packages = ", ".join(f"{name} {version}" for name, version in install.packages)
    state = f"{_engine_text(engine)}; {_containers_text(setup)}; {_daemon_text(setup)}"
    kept = ("no container, image or volume is stopped or removed; daemon.json keys are kept, "
            "the nvidia runtime is added beside them")
    if install.kind == "docker-ce":
        return DockerRow(
            "Docker", f"Docker CE ({packages}); {state}", "Docker's repository (download.docker.com)",
            "use it: never install docker.io; start its docker.service when no engine answers; add the nvidia runtime "
            f"(loaded by a reload, containers keep running); {kept}",
            "docker.io declares Conflicts: docker-ce, docker-ce-cli: apt could install it only by removing Docker CE",
            blocking=False)
    if install.kind == "docker.io":
        return DockerRow("Docker", f"docker.io ({packages}); {state}", "the distribution's packages",
                         f"use it: add the nvidia runtime; {kept}", "the engine rigforge itself installs",
                         blocking=False)
    if install.kind == "none":
        return DockerRow("Docker", "none", "-", "install docker.io and NVIDIA's container toolkit",
                         "no Docker on the rig", blocking=False)
    origin = packages or f"{install.cli}, owned by {install.cli_package or 'no package'}"
    if replacing_would_block(install, engine):
        return DockerRow(
            "Docker", f"{origin}; {state}", install.cli_package or "installed by hand",
            "stop: rigforge does not install docker.io over another Docker",
            "docker.io would conflict with it or shadow its docker command; start its engine (rigforge then "
            "uses it), or remove it yourself", blocking=True)
    return DockerRow("Docker", f"{origin}; {state}", install.cli_package or "installed by hand",
                     f"use the engine that answers as it is; {kept}",
                     "an engine answers: nothing needs installing", blocking=False)
