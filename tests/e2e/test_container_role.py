"""The container role on real sandbox hosts, in both of the engine cases it documents (roles/container.py).

- ``ctr``: a plain host. The role installs Debian's real ``docker.io``, which this host's systemd runs
  (a nested engine), then NVIDIA's container toolkit, which here is a STAND-IN package from a local
  signed apt repository (tests/standins/nvidia_container_toolkit.py; NVIDIA's repository is unreachable).
- ``ctr-sock``: the machine's Docker socket is mounted in. The role must leave that engine alone: it
  masks the host's own docker units, installs the client and restarts nothing.

Both hosts share one pyinfra run per step (pyinfra runs hosts in parallel), on the 2x-pix profile with
only the toolkit repository pointed at the stand-in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyinfra_run import assert_no_changes, changed_ops, run_pyinfra

from rigforge.sandbox import SandboxHost, exec_in
from tests.standins.nvidia_container_toolkit import build_repo, serve_in_host

CONTAINER_DEPLOY = "from roles import base, container\n\nbase.apply_base()\ncontainer.apply_container()\n"
STANDIN_LOG = "/var/log/nvidia-ctk-standin.log"


@dataclass
class Hosts:
    managed: SandboxHost
    external: SandboxHost
    inventory: Path
    deploy: Path
    first_run_output: str


def _sh(host: SandboxHost, command: str) -> str:
    proc = exec_in(host, command)
    assert proc.returncode == 0, f"{host.name}: {command}: {proc.stderr}"
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def hosts(sandbox, tmp_path_factory: pytest.TempPathFactory) -> Hosts:
    work = tmp_path_factory.mktemp("container")
    repo = build_repo(work / "standin-repo")
    managed = sandbox.fresh_host("ctr")
    external = sandbox.fresh_host("ctr-sock", mount_docker_socket=True)
    for host in (managed, external):
        serve_in_host(repo, host.container)
    inventory = sandbox.write_inventory(work / "inventory.py", [managed, external], "2x-pix", repo.profile_overrides())
    deploy = work / "container_deploy.py"
    deploy.write_text(CONTAINER_DEPLOY)
    result = run_pyinfra(inventory, deploy)
    return Hosts(managed, external, inventory, deploy, result.stdout + result.stderr)


def test_managed_engine_gets_docker_io_and_the_nvidia_runtime(hosts: Hosts) -> None:
    host = hosts.managed
    installed = _sh(host, "dpkg-query -W -f '${Status}\\n' docker.io nvidia-container-toolkit")
    assert installed.splitlines() == ["install ok installed"] * 2
    assert _sh(host, "systemctl is-active docker.service; systemctl is-enabled docker.service") == "active\nenabled"
    daemon = json.loads(_sh(host, "cat /etc/docker/daemon.json"))
    assert daemon["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert "nvidia" in json.loads(_sh(host, "docker info --format '{{json .Runtimes}}'"))
    assert _sh(host, f"cat {STANDIN_LOG}").splitlines() == ["runtime configure --runtime=docker"]
    sources = _sh(host, "cat /etc/apt/sources.list.d/nvidia-container-toolkit.sources")
    assert "Signed-By: /etc/apt/keyrings/nvidia-container-toolkit.gpg" in sources
    assert _sh(host, "systemctl is-system-running") == "running"


def test_external_engine_is_used_as_it_is(hosts: Hosts) -> None:
    host = hosts.external
    assert _sh(host, "readlink /etc/systemd/system/docker.service /etc/systemd/system/docker.socket") == \
        "/dev/null\n/dev/null"
    assert _sh(host, "docker version --format '{{.Server.Version}}'")  # the machine's engine, through the socket
    assert _sh(host, "systemctl is-system-running") == "running"  # no docker unit failed for the socket
    assert "nvidia" in json.loads(_sh(host, "cat /etc/docker/daemon.json"))["runtimes"]
    assert "restart it where it runs to load the nvidia runtime" in hosts.first_run_output


def test_second_run_changes_nothing_and_restarts_nothing(hosts: Hosts) -> None:
    started = _sh(hosts.managed, "systemctl show -p ActiveEnterTimestampMonotonic docker.service")
    assert_no_changes(hosts.inventory, hosts.deploy)
    result = run_pyinfra(hosts.inventory, hosts.deploy)
    assert changed_ops(result) == []
    assert _sh(hosts.managed, "systemctl show -p ActiveEnterTimestampMonotonic docker.service") == started
    assert len(_sh(hosts.managed, f"cat {STANDIN_LOG}").splitlines()) == 1


def test_a_runtime_lost_from_daemon_json_is_configured_and_loaded_again(hosts: Hosts) -> None:
    host = hosts.managed
    # reset-failed clears systemd's start counter (3 starts a minute), which this test's restarts would reach.
    _sh(host, "echo '{}' > /etc/docker/daemon.json && systemctl reset-failed docker.service "
              "&& systemctl restart docker.service")
    assert "nvidia" not in json.loads(_sh(host, "docker info --format '{{json .Runtimes}}'"))
    started = _sh(host, "systemctl show -p ActiveEnterTimestampMonotonic -p MainPID docker.service")

    result = run_pyinfra(hosts.inventory, hosts.deploy, "--limit", host.name)

    assert sorted(changed_ops(result)) == [
        "Container runtime | Add the nvidia runtime to daemon.json (nvidia-ctk, only when missing)",
        "Container runtime | Reload Docker when the nvidia runtime is configured but not loaded",
    ]
    # Debian's real dockerd loaded the runtime on the reload (SIGHUP): same process, never restarted.
    assert "nvidia" in json.loads(_sh(host, "docker info --format '{{json .Runtimes}}'"))
    assert _sh(host, "systemctl show -p ActiveEnterTimestampMonotonic -p MainPID docker.service") == started
    assert_no_changes(hosts.inventory, hosts.deploy)
