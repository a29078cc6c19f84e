"""First contact with a rig, on real sandbox hosts: each failure is one line for its host, the others go on.

Every inventory here has a good host beside the failing entry, both written with ``rig_host`` as a rig
owner writes them (the path a real rig takes: host-key checking on, the rigforge connector). The failing
entry differs from a good one only in the one thing under test: its key file, its known_hosts, its host key
(the host recreated from the image, as a reinstalled rig would be) or a loopback port nothing listens on.
The sandbox hosts stand in for rigs only because tests may reach nothing but loopback.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
from pyinfra_run import PyinfraResult, run_pyinfra

from rigforge.sandbox import SandboxHost, reset

GOOD = "good"


@pytest.fixture(scope="module")
def hosts(sandbox) -> tuple[SandboxHost, SandboxHost]:
    return sandbox.fresh_host("contact"), sandbox.fresh_host("contact-b")


def entry(name: str, host_port: int, key: Path, known_hosts: Path) -> str:
    return (f"    rig_host({name!r}, profile='sandbox', ssh_hostname='127.0.0.1', ssh_port={host_port},\n"
            f"             ssh_key={str(key)!r}, ssh_known_hosts_file={str(known_hosts)!r}),\n")


def run_with_good_host(sandbox, hosts, tmp_path: Path, bad: str) -> PyinfraResult:
    """Run ``hostname`` on the good host and the ``bad`` entry in one inventory; return pyinfra's result."""
    state = sandbox.state
    inventory = tmp_path / "inventory.py"
    inventory.write_text("from rigforge.inventory import rig_host\n\nrigs = [\n"
                         + entry(GOOD, hosts[0].port, state.key_path, state.known_hosts_path) + bad + "]\n")
    return run_pyinfra(inventory, "exec", "--", "hostname", check=False, timeout=120)


def assert_one_line_and_good_host_unaffected(result: PyinfraResult, name: str, line: str) -> None:
    output = result.stderr + result.stdout
    assert result.returncode != 0, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    lines = [text.strip() for text in output.splitlines() if f"[{name}]" in text]
    assert lines == [f"[{name}] {line}"], output[-3000:]
    results = (result.data or {}).get("results") or {}
    assert results.get("failed_hosts") == [name], output[-3000:]
    # The good host connected and ran `hostname`: only the failing entry left the run.
    assert [op["success"] for op in results["operations"]] == [[GOOD]], output[-3000:]


def test_missing_key_file(sandbox, hosts, tmp_path: Path) -> None:
    state = sandbox.state
    missing = tmp_path / "no-such-dir" / "id_ed25519"
    result = run_with_good_host(sandbox, hosts, tmp_path, entry("nokey", hosts[1].port, missing,
                                                                state.known_hosts_path))
    assert_one_line_and_good_host_unaffected(
        result, "nokey",
        f"SSH key file {missing} does not exist; fix ssh_key in the inventory entry 'nokey' to name the private "
        f"key that logs in to the rig, or create one (ssh-keygen -t ed25519 -f {missing}) and add its .pub to "
        "the rig's authorized_keys")


def test_unknown_host_key(sandbox, hosts, tmp_path: Path) -> None:
    state = sandbox.state
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    result = run_with_good_host(sandbox, hosts, tmp_path, entry("newrig", hosts[1].port, state.key_path, empty))
    port = hosts[1].port
    output = result.stderr
    line = next((text.strip() for text in output.splitlines() if "[newrig]" in text), "")
    assert line.startswith(f"[newrig] host key of [127.0.0.1]:{port} is not in {empty} (rigforge never accepts an "
                           "unknown host key); it showed ssh-ed25519 SHA256:"), output[-3000:]
    assert f"then add it: ssh-keyscan -p {port} 127.0.0.1 >> {empty}" in line
    assert empty.read_text() == "", "an unknown host key was accepted"
    assert_one_line_and_good_host_unaffected(result, "newrig", line.removeprefix("[newrig] "))


def test_changed_host_key_is_refused(sandbox, hosts, tmp_path: Path) -> None:
    state = sandbox.state
    pinned = tmp_path / "known_hosts_before"
    shutil.copy(state.known_hosts_path, pinned)
    reset(hosts[1].name, sandbox.state_dir)  # recreated from the image: same port, new host key
    result = run_with_good_host(sandbox, hosts, tmp_path, entry("rebuilt", hosts[1].port, state.key_path, pinned))
    port = hosts[1].port
    line = next((text.strip() for text in result.stderr.splitlines() if "[rebuilt]" in text), "")
    assert line.startswith(f"[rebuilt] REFUSED: the host key of [127.0.0.1]:{port} CHANGED (it now shows "
                           "ssh-ed25519 SHA256:"), result.stderr[-3000:]
    assert f"ssh-keygen -f {pinned} -R '[127.0.0.1]:{port}'" in line
    assert "[rebuilt] Connected" not in result.stderr
    assert_one_line_and_good_host_unaffected(result, "rebuilt", line.removeprefix("[rebuilt] "))


def test_host_that_does_not_answer(sandbox, hosts, tmp_path: Path) -> None:
    state = sandbox.state
    with socket.socket() as probe:  # a loopback port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = run_with_good_host(sandbox, hosts, tmp_path,
                                entry("silent", port, state.key_path, state.known_hosts_path))
    assert_one_line_and_good_host_unaffected(
        result, "silent",
        f"no SSH answer from 127.0.0.1 port {port} within 10s (Connection refused); check that the rig is on, "
        "the address and ssh_port in the inventory entry 'silent', and that sshd runs there")
