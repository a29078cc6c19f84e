"""A rig whose owner installed Docker CE and left its daemon stopped: rigforge uses it and replaces nothing.

Debian 12's ``docker.io`` conflicts with Docker CE, so the container role installing it (as it did when no
engine answered) would remove the owner's Docker CE. On one sandbox host:

- Docker CE is a STAND-IN (tests/standins/docker_ce.py: Docker's apt repository is not reachable here):
  packages with the control fields Docker publishes, served from the signed stand-in repository the toolkit
  tests use, installed by apt the way an owner does, then stopped and disabled. Its ``dockerd`` passes the
  API through to the machine's real engine, whose socket the sandbox mounts in the host and this test moves
  aside to where that dockerd looks for it, so nothing answers on /var/run/docker.sock until
  docker.service starts. NVIDIA's container toolkit is the usual stand-in.
- The owner's objects are real, on the machine's engine: a running container, a stopped one, an image tag
  and a volume, plus ``data-root`` and ``registry-mirrors`` in the host's daemon.json. rigforge writes
  daemon.json only through ``nvidia-ctk runtime configure``; the real tool loads the file as a map and adds
  ``runtimes.nvidia`` to it, keeping every other key (NVIDIA/nvidia-container-toolkit,
  pkg/config/engine/docker/docker.go, ``AddRuntime``, commit 06aa43fe0910), as the stand-in ``nvidia-ctk`` does.

The container layer (base + container roles, on the 2x-pix profile) must leave the Docker CE packages
installed, never install docker.io, start the owner's docker.service, add the nvidia runtime beside the
owner's daemon.json keys and load it by a reload, touch none of the owner's objects, and change nothing on
a second run.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyinfra_run import PyinfraResult, assert_no_changes, changed_ops, run_pyinfra

from rigforge.checks.docker_install import docker_install, docker_row
from rigforge.facts.docker import DockerEngine, DockerSetup
from rigforge.facts.packages import DpkgPackages
from rigforge.sandbox import SandboxHost, exec_in
from tests.standins.docker_ce import ENGINE_SOCKET, build_debs
from tests.standins.nvidia_container_toolkit import build_repo, serve_in_host

CONTAINER_DEPLOY = "from roles import base, container\n\nbase.apply_base()\ncontainer.apply_container()\n"
CE_PACKAGES = ("docker-ce", "docker-ce-cli", "containerd.io")
INSTALLED = sorted(f"{name} install ok installed" for name in CE_PACKAGES)
OWNER_DAEMON_JSON = {"data-root": "/srv/owner-docker", "registry-mirrors": ["http://127.0.0.1:5999"]}
# The owner's own source for the stand-in repository. "localhost", not the toolkit source's 127.0.0.1: apt
# refuses one URI with two Signed-By files, and these are two vendors' repositories on a real rig.
OWNER_SOURCES = """Types: deb
URIs: http://localhost:{port}/deb/{arch}/
Suites: ./
Signed-By: /etc/apt/keyrings/docker.asc
"""


@dataclass
class Owner:
    """The owner's objects on the machine's engine, by name."""

    running: str
    stopped: str
    image: str
    volume: str


@dataclass
class Rig:
    host: SandboxHost
    inventory: Path
    deploy: Path
    owner: Owner
    started_at: str
    remove_simulation: str
    first: PyinfraResult
    work: Path


def _sh(host: SandboxHost, command: str, timeout: float = 300) -> str:
    proc = exec_in(host, command, timeout=timeout)
    assert proc.returncode == 0, f"{host.name}: {command}: {proc.stdout}{proc.stderr}"
    return proc.stdout.strip()


def _machine(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0 or not check, f"docker {' '.join(args)}: {proc.stderr}"
    return proc.stdout.strip()


def _statuses(host: SandboxHost) -> list[str]:
    return sorted(_sh(host, "dpkg-query -W -f '${Package} ${Status}\\n' " + " ".join(CE_PACKAGES)).splitlines())


def _docker_io_status(host: SandboxHost) -> str:
    return exec_in(host, "dpkg-query -W -f '${Status}' docker.io").stdout.strip()


def _move_machine_socket(host: SandboxHost) -> None:
    # The sandbox mounts the machine's socket at /run/docker.sock; the stand-in dockerd reaches it here.
    _sh(host, f"mkdir -p {Path(ENGINE_SOCKET).parent} && touch {ENGINE_SOCKET} "
              f"&& mount --bind /run/docker.sock {ENGINE_SOCKET} && umount /run/docker.sock && rm -f /run/docker.sock")
    _sh(host, f"curl -sf --unix-socket {ENGINE_SOCKET} http://localhost/_ping")


def _install_docker_ce_as_the_owner(host: SandboxHost, port: int) -> None:
    arch = _sh(host, "dpkg --print-architecture")
    _sh(host, f"install -d -m 755 /etc/apt/keyrings && curl -sf http://127.0.0.1:{port}/gpgkey "
              f"-o /etc/apt/keyrings/docker.asc && cat > /etc/apt/sources.list.d/docker.sources <<'EOF'\n"
              f"{OWNER_SOURCES.format(port=port, arch=arch)}EOF")
    _sh(host, "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
              "--no-install-recommends " + " ".join(CE_PACKAGES), timeout=600)
    _sh(host, "systemctl disable --now docker.service docker.socket")
    _sh(host, "mkdir -p /etc/docker && cat > /etc/docker/daemon.json <<'EOF'\n"
              f"{json.dumps(OWNER_DAEMON_JSON, indent=4)}\nEOF")


def _make_owner_objects(suffix: str, image: str) -> Owner:
    owner = Owner(f"owner-run-{suffix}", f"owner-stopped-{suffix}", f"owner-image:{suffix}", f"owner-vol-{suffix}")
    _machine("run", "-d", "--name", owner.running, "-v", f"{owner.volume}:/data", "--entrypoint", "sleep",
             image, "infinity")
    _machine("create", "--name", owner.stopped, "--entrypoint", "true", image)
    _machine("tag", image, owner.image)
    return owner


def _remove_owner_objects(owner: Owner) -> None:
    _machine("rm", "-f", owner.running, owner.stopped, check=False)
    _machine("rmi", owner.image, check=False)
    _machine("volume", "rm", owner.volume, check=False)


@pytest.fixture(scope="module")
def rig(sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    work = tmp_path_factory.mktemp("docker-ce")
    repo = build_repo(work / "standin-repo", build_debs)
    host = sandbox.fresh_host("dce", mount_docker_socket=True)
    owner = _make_owner_objects(sandbox.suffix, sandbox.image)
    try:
        serve_in_host(repo, host.container)
        _move_machine_socket(host)
        _install_docker_ce_as_the_owner(host, repo.port)
        started_at = _machine("inspect", "-f", "{{.State.StartedAt}}", owner.running)
        simulation = exec_in(host, "apt-get -s install docker.io")
        remove_simulation = f"rc={simulation.returncode}\n{simulation.stdout}{simulation.stderr}"
        inventory = sandbox.write_inventory(work / "inventory.py", [host], "2x-pix", repo.profile_overrides())
        deploy = work / "container_deploy.py"
        deploy.write_text(CONTAINER_DEPLOY)
        assert _statuses(host) == INSTALLED
        assert _sh(host, "systemctl is-active docker.service || true") == "inactive"
        first = run_pyinfra(inventory, deploy)
        (work / "first-run.txt").write_text(first.stdout + first.stderr)  # kept for the docs' example
        yield Rig(host, inventory, deploy, owner, started_at, remove_simulation, first, work)
    finally:
        _remove_owner_objects(owner)


def test_the_stand_ins_conflict_with_docker_io_as_the_real_packages_do(rig: Rig) -> None:
    # What the role used to run on this rig: apt 2.6 cannot put docker.io (which needs Debian's containerd and
    # runc) beside containerd.io (Conflicts: containerd, runc) and gives up: the deploy failed right there.
    assert rig.remove_simulation.startswith("rc=100\n")
    assert "containerd.io : Conflicts: containerd" in rig.remove_simulation


def test_docker_ce_is_kept_and_docker_io_never_installed(rig: Rig) -> None:
    assert _statuses(rig.host) == INSTALLED
    assert _docker_io_status(rig.host) in ("", "unknown ok not-installed")
    assert "docker.io" not in _sh(rig.host, "cat /var/log/apt/history.log")
    assert "Docker CE is installed (docker-ce, docker-ce-cli, containerd.io): using it" in \
        rig.first.stdout + rig.first.stderr


def test_the_owners_engine_is_started_with_the_nvidia_runtime_beside_the_owners_keys(rig: Rig) -> None:
    host = rig.host
    assert _sh(host, "systemctl is-active docker.service; systemctl is-enabled docker.service") == "active\nenabled"
    daemon = json.loads(_sh(host, "cat /etc/docker/daemon.json"))
    assert {key: daemon[key] for key in OWNER_DAEMON_JSON} == OWNER_DAEMON_JSON
    assert daemon["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    info = json.loads(_sh(host, "curl -sf --unix-socket /var/run/docker.sock http://localhost/info"))
    assert "nvidia" in info["Runtimes"]
    assert "Container runtime | Reload Docker when the nvidia runtime is configured but not loaded" in \
        changed_ops(rig.first)


def test_no_owner_object_was_touched(rig: Rig) -> None:
    owner = rig.owner
    assert _machine("inspect", "-f", "{{.State.Status}} {{.State.StartedAt}}", owner.running) == \
        f"running {rig.started_at}"
    assert _machine("inspect", "-f", "{{.State.Status}}", owner.stopped) == "created"
    assert _machine("image", "inspect", "-f", "{{.Id}}", owner.image)
    assert _machine("volume", "inspect", "-f", "{{.Name}}", owner.volume) == owner.volume
    # The host's docker (the stand-in package's real client) sees them through the owner's engine.
    names = _sh(rig.host, "docker ps -a --format '{{.Names}}'").splitlines()
    assert owner.running in names and owner.stopped in names


def test_second_run_changes_nothing_and_restarts_nothing(rig: Rig) -> None:
    unit = "systemctl show -p MainPID -p ActiveEnterTimestampMonotonic docker.service"
    before = _sh(rig.host, unit)
    assert_no_changes(rig.inventory, rig.deploy)
    assert changed_ops(run_pyinfra(rig.inventory, rig.deploy)) == []
    assert _sh(rig.host, unit) == before
    assert _statuses(rig.host) == INSTALLED
    assert _machine("inspect", "-f", "{{.State.StartedAt}}", rig.owner.running) == rig.started_at


def test_the_facts_and_the_table_row_read_this_rig(rig: Rig) -> None:
    outputs = {}
    for fact in (DockerSetup, DockerEngine, DpkgPackages):
        outputs[fact] = _sh(rig.host, fact().command())
        (rig.work / f"fact-{fact.__name__}-dce.txt").write_text(outputs[fact] + "\n")  # kept for fixtures
    setup = DockerSetup().process(outputs[DockerSetup].splitlines())
    engine = DockerEngine().process(outputs[DockerEngine].splitlines())
    install = docker_install(DpkgPackages().process(outputs[DpkgPackages].splitlines()), setup)
    assert (setup.cli, setup.cli_package) == ("/usr/bin/docker", "docker-ce-cli")
    assert setup.daemon_keys == ("data-root", "registry-mirrors", "runtimes")
    running = {c.name for c in setup.running}
    assert rig.owner.running in running and rig.owner.stopped not in running
    assert install.kind == "docker-ce" and install.package_names == ("docker-ce", "docker-ce-cli", "containerd.io")
    row = docker_row(install, engine, setup)
    assert not row.blocking and "daemon.json keys: data-root, registry-mirrors" in row.found
