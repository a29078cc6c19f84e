"""The sandbox hosts themselves: reuse, strict SSH, reboot, removal, and the pyinfra run helpers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import paramiko
import pytest
from pyinfra_run import assert_no_changes, changed_ops, parse_json_output, run_pyinfra

from rigforge.sandbox import SandboxError, boot_token, down, exec_in, reset, up, wait_rebooted
from rigforge.sandbox.docker import docker
from rigforge.sandbox.ssh import host_key_line, ssh_run

if TYPE_CHECKING:
    from conftest import Sandbox

# A deploy small enough to show change tracking: one file line, then one op gated on it.
TINY_DEPLOY = '''
from pyinfra.operations import files, server

line = files.line(name="sandbox marker line", path="/etc/rigforge-sandbox-check", line="checked=1")
server.shell(name="follow-up of the marker", commands=["true"], _if=line.did_change)
'''


def _container_info(container: str) -> dict:
    return json.loads(docker("inspect", container).stdout)[0]


def test_up_twice_reuses_the_running_host(sandbox: Sandbox) -> None:
    host = sandbox.fresh_host("reuse")
    before = _container_info(host.container)
    known_hosts = sandbox.state.known_hosts_path.read_text()

    state = up([host.name], sandbox.state_dir)

    after = _container_info(host.container)
    assert state.host(host.name) == host
    assert (after["Id"], after["State"]["StartedAt"]) == (before["Id"], before["State"]["StartedAt"])
    assert sandbox.state.known_hosts_path.read_text() == known_hosts


def test_up_starts_a_stopped_host_on_its_port(sandbox: Sandbox) -> None:
    host = sandbox.fresh_host("stopped")
    docker("stop", host.container)
    state = up([host.name], sandbox.state_dir)

    assert state.host(host.name).port == host.port
    assert _container_info(host.container)["State"]["Running"]
    assert exec_in(host, "systemctl is-system-running").stdout.strip() == "running"


def test_docker_socket_is_mounted_only_when_asked(sandbox: Sandbox) -> None:
    host = sandbox.fresh_host("socket", mount_docker_socket=True)

    assert exec_in(host, "test -S /var/run/docker.sock").returncode == 0
    with pytest.raises(SandboxError, match="with the docker socket mounted"):
        up([host.name], sandbox.state_dir)


def test_ssh_with_strict_host_keys(sandbox: Sandbox, tmp_path: Path) -> None:
    host = sandbox.fresh_host("ssh")
    other = sandbox.fresh_host("ssh-other")
    state = sandbox.state

    assert ssh_run(host.port, state.key_path, state.known_hosts_path, "hostname") == (0, f"{host.name}\n")

    other_key = exec_in(other, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(host_key_line(host.port, other_key) + "\n")
    with pytest.raises(paramiko.BadHostKeyException):
        ssh_run(host.port, state.key_path, wrong, "true")
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        ssh_run(host.port, state.key_path, empty, "true")


def test_pyinfra_connects_and_second_run_changes_nothing(sandbox: Sandbox, tmp_path: Path) -> None:
    host = sandbox.fresh_host("pyinfra")
    inventory = sandbox.write_inventory(tmp_path / "inventory.py", [host], "sandbox")
    deploy = tmp_path / "tiny_deploy.py"
    deploy.write_text(TINY_DEPLOY)

    planned = run_pyinfra(inventory, deploy, dry=True)
    assert changed_ops(planned) == ["sandbox marker line"]
    assert exec_in(host, "test -e /etc/rigforge-sandbox-check").returncode == 1, "--dry changed the host"

    first = run_pyinfra(inventory, deploy)
    assert changed_ops(first) == ["sandbox marker line", "follow-up of the marker"]
    assert exec_in(host, "cat /etc/rigforge-sandbox-check").stdout == "checked=1\n"

    second = assert_no_changes(inventory, deploy)
    assert [op["name"] for op in second.plan] == ["sandbox marker line", "follow-up of the marker"]


def test_assert_no_changes_names_the_offending_ops(sandbox: Sandbox, tmp_path: Path) -> None:
    host = sandbox.fresh_host("offending")
    inventory = sandbox.write_inventory(tmp_path / "inventory.py", [host], "sandbox")
    deploy = tmp_path / "tiny_deploy.py"
    deploy.write_text(TINY_DEPLOY)

    with pytest.raises(AssertionError, match=f"sandbox marker line on {host.name}"):
        assert_no_changes(inventory, deploy)


def test_reboot_comes_back_with_systemd_running(sandbox: Sandbox) -> None:
    host = sandbox.fresh_host("reboot")
    state = sandbox.state
    token = boot_token(host)
    restarts = _container_info(host.container)["RestartCount"]

    ssh_run(host.port, state.key_path, state.known_hosts_path, "systemctl reboot", wait=False)
    system = wait_rebooted(host, state, token)

    assert system == "running"
    assert boot_token(host) != token
    assert _container_info(host.container)["RestartCount"] == restarts + 1
    assert ssh_run(host.port, state.key_path, state.known_hosts_path, "hostname")[1] == f"{host.name}\n"


def test_reset_gives_a_new_host_key_on_the_same_port(sandbox: Sandbox) -> None:
    host = sandbox.fresh_host("reset")
    exec_in(host, "touch /root/left-over")
    key_before = sandbox.state.known_hosts_path.read_text()

    renewed = reset(host.name, sandbox.state_dir)

    assert renewed.port == host.port
    assert sandbox.state.known_hosts_path.read_text() != key_before
    assert exec_in(renewed, "test -e /root/left-over").returncode == 1
    state = sandbox.state
    assert ssh_run(renewed.port, state.key_path, state.known_hosts_path, "true")[0] == 0


def test_down_removes_container_and_entries(sandbox: Sandbox) -> None:
    host = sandbox.fresh_host("down")

    removed = down([host.name], sandbox.state_dir)

    assert removed == [host.container]
    assert docker("inspect", host.container, check=False).returncode != 0
    state = sandbox.state
    assert host.name not in [h.name for h in state.hosts]
    assert f"[127.0.0.1]:{host.port} " not in state.known_hosts_path.read_text()


def test_boot_tools_run_in_the_sandbox(sandbox: Sandbox) -> None:
    host = sandbox.fresh_host("boot")
    set_cmdline = ("sed -i 's/^GRUB_CMDLINE_LINUX_DEFAULT=.*/GRUB_CMDLINE_LINUX_DEFAULT=\"quiet iommu=pt\"/' "
                   "/etc/default/grub")
    assert exec_in(host, set_cmdline).returncode == 0

    update = exec_in(host, "update-grub && update-initramfs -u")

    assert update.returncode == 0, update.stderr
    linux_lines = exec_in(host, "grep -E '^\\s+linux\\s' /boot/grub/grub.cfg").stdout.splitlines()
    assert linux_lines and all("iommu=pt" in line for line in linux_lines if " single" not in line)


def test_parse_json_output_skips_deploy_prints() -> None:
    stdout = 'a print from a deploy {not json}\n{"plan": [], "results": null}\n'
    assert parse_json_output(stdout) == {"plan": [], "results": None}
    assert parse_json_output("no json here") is None
