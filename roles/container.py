"""Container role: the Docker engine, and NVIDIA's container toolkit with its runtime loaded by the engine.

The engine rigforge installs is Debian/Ubuntu's own ``docker.io`` package: it comes from the distribution
archive the rig already trusts (no third repository and key to keep), gets the distribution's security
updates, and is what NVIDIA's toolkit guide supports next to Docker CE. It is installed only on a rig
without any Docker (rigforge/checks/docker_install.py): ``docker.io`` conflicts with Docker CE, so apt could
install it only by removing an owner's Docker CE.

Which engine the role manages, decided from ``docker_install`` and the ``DockerEngine`` fact:

- Docker CE (``docker-ce``, ``docker-ce-cli``, ``containerd.io``), running or stopped: never replaced.
  The role installs nothing of Docker's, starts and enables its docker.service when no engine answers,
  and adds NVIDIA's runtime (the owner's daemon.json keys kept, the engine reloaded, not restarted);
- no Docker, or ``docker.io``, with no engine answering or this host's systemd running it: the role
  installs ``docker.io`` when needed, keeps docker.service enabled and running, and reloads it only when
  daemon.json names a runtime the running engine has not loaded;
- an engine answers but this host's systemd does not run it (a socket mounted from elsewhere, as on the
  sandbox hosts, or a daemon started by hand): the role leaves that engine alone. Without a ``docker``
  command it masks this host's docker.service and docker.socket before installing ``docker.io`` for the
  client, so the package's daemon never fights the outside engine for the socket, and it reloads
  nothing: a runtime configured here is reported as to be loaded where the engine runs;
- another Docker (moby, podman-docker, a ``docker`` no package owns) with no engine answering: the host
  stops at this layer, changing nothing; rigforge never installs ``docker.io`` over it.

No container, image or volume is ever stopped, removed or pruned here.
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.facts.deb import DebArch
from pyinfra.facts.server import LinuxDistribution
from pyinfra.operations import apt as pyinfra_apt
from pyinfra.operations import files

from rigforge.checks.docker_install import DockerInstall, docker_install, replacing_would_block
from rigforge.context import current_profile
from rigforge.facts.docker import DockerEngine, DockerSetup, EngineState
from rigforge.facts.packages import DpkgPackages
from rigforge.operations import apt
from rigforge.operations.docker import engine_loaded_runtime, nvidia_runtime_configured, other_docker_kept
from rigforge.operations.files import managed_file
from rigforge.operations.missing_tool import service_unit
from rigforge.profile import AptRepo
from rigforge.profile.loader import ProfileError
from rigforge.render import render

TOOLKIT_KEYRING = "/etc/apt/keyrings/nvidia-container-toolkit.gpg"
TOOLKIT_SOURCES = "/etc/apt/sources.list.d/nvidia-container-toolkit.sources"
ENGINE_UNITS = ("docker.service", "docker.socket")


def distro_name(distribution: dict) -> str:
    """The repository name of a distribution release, as NVIDIA's repositories spell it (ubuntu2404, debian12)."""
    release = distribution.get("release_meta") or {}
    name = str(release.get("ID") or distribution.get("name") or "").lower()
    version = str(release.get("VERSION_ID") or distribution.get("major") or "")
    return f"{name}{version.replace('.', '')}"


def repo_url(template: str, arch: str, distro: str) -> str:
    """Fill a profile repository URL's ``{arch}`` and ``{distro}`` for this host."""
    return template.replace("{arch}", arch).replace("{distro}", distro)


def _install_engine(install: DockerInstall, engine: EngineState) -> None:
    external, has_cli = engine.external, engine.cli is not None
    if install.kind == "other":
        found = ", ".join(f"{n} {v}" for n, v in install.packages) or f"{install.cli} (no package owns it)"
        other_docker_kept(name="Keep the Docker found on the rig (never install docker.io over it)",
                          found=found, blocking=replacing_would_block(install, engine))
        return
    if external:
        logger.info(f"[{host.name}] Docker engine on /var/run/docker.sock is not run by this host's systemd: "
                    "using it as it is (client only, no restarts)")
        if has_cli or install.kind == "docker-ce":
            return
        for unit in ENGINE_UNITS:
            # A unit linked to /dev/null is masked: the package's daemon cannot take the socket over.
            files.link(name=f"Mask {unit} (the engine runs elsewhere)", path=f"/etc/systemd/system/{unit}",
                       target="/dev/null")
        apt.packages(name="Install the Docker client (docker.io)", packages=["docker.io"])
        return
    if install.kind == "docker-ce":
        logger.info(f"[{host.name}] Docker CE is installed ({', '.join(install.package_names)}): using it, "
                    "never installing docker.io over it")
    elif not engine.answers or not has_cli:
        apt.packages(name="Install the Docker engine (docker.io)", packages=["docker.io"])
    service_unit(name="Keep docker.service enabled and running", service="docker.service",
                 running=True, enabled=True)


def _install_toolkit(repo: AptRepo) -> None:
    url = repo_url(repo.url, host.get_fact(DebArch), distro_name(host.get_fact(LinuxDistribution)))
    pyinfra_apt.key(name="Add NVIDIA's container toolkit signing key", src=repo.key_url, dest=TOOLKIT_KEYRING)
    managed_file(name=f"Write {TOOLKIT_SOURCES}", dest=TOOLKIT_SOURCES,
                 content=render("container/nvidia-container-toolkit.sources.j2", current_profile(),
                                url=url, keyring=TOOLKIT_KEYRING))
    apt.packages(name="Install nvidia-container-toolkit", packages=["nvidia-container-toolkit"])
    files.directory(name="Create /etc/docker", path="/etc/docker", mode="755", user="root", group="root")
    nvidia_runtime_configured(name="Add the nvidia runtime to daemon.json (nvidia-ctk, only when missing)")
    engine_loaded_runtime(name="Reload Docker when the nvidia runtime is configured but not loaded")


@deploy("Container runtime")
def apply_container() -> None:
    """Install the Docker engine and, when the profile asks, NVIDIA's container toolkit and runtime."""
    profile = current_profile()
    container = profile.container
    if container is None:
        return
    engine = host.get_fact(DockerEngine)
    install = docker_install(host.get_fact(DpkgPackages) or {}, host.get_fact(DockerSetup))
    _install_engine(install, engine)
    if container.nvidia_toolkit:
        if container.toolkit_repo is None:
            raise ProfileError(f"profile {profile.name}: container.nvidia_toolkit needs container.toolkit_repo")
        _install_toolkit(container.toolkit_repo)
