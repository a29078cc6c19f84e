"""First-contact checks: key files, known_hosts verdicts and the one-line messages (no hosts; real keys)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import paramiko
import pytest

from rigforge.connection.connector import RigSSHConnector, connector_host_name
from rigforge.connection.first_contact import (
    changed_key_line,
    host_key_problem,
    host_key_verdict,
    key_file_problem,
    known_hosts_name,
    load_known_hosts,
    no_answer_line,
    unknown_key_line,
)


@pytest.fixture(scope="module")
def keys() -> tuple[paramiko.PKey, paramiko.PKey]:
    return paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()


def known_hosts_file(tmp_path: Path, entry: str, key: paramiko.PKey) -> Path:
    path = tmp_path / "known_hosts"
    path.write_text(f"{entry} {key.get_name()} {key.get_base64()}\n")
    return path


def test_known_hosts_name_follows_openssh() -> None:
    assert known_hosts_name("rig.example", 22) == "rig.example"
    assert known_hosts_name("127.0.0.1", 2222) == "[127.0.0.1]:2222"


def test_key_file_missing_names_entry_and_fix(tmp_path: Path) -> None:
    missing = tmp_path / "id_ed25519"
    line = key_file_problem("rig2x-a", str(missing))
    assert line is not None and "\n" not in line
    assert line.startswith(f"SSH key file {missing} does not exist; fix ssh_key in the inventory entry 'rig2x-a'")
    assert f"ssh-keygen -t ed25519 -f {missing}" in line


def test_key_file_directory_and_agent(tmp_path: Path) -> None:
    assert "is not a file" in (key_file_problem("r", str(tmp_path)) or "")
    assert key_file_problem("r", None) is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file: unreadable cannot be shown as root")
def test_key_file_unreadable(tmp_path: Path) -> None:
    key = tmp_path / "id"
    key.write_text("x")
    key.chmod(0)
    assert "is not readable by this user" in (key_file_problem("r", str(key)) or "")


def test_readable_key_file_passes(tmp_path: Path) -> None:
    key = tmp_path / "id"
    key.write_text("x")
    assert key_file_problem("r", str(key)) is None


def test_verdicts_match_paramiko_rule(tmp_path: Path, keys) -> None:
    known, other = keys
    hosts = load_known_hosts(str(known_hosts_file(tmp_path, "[10.0.0.5]:2222", known)))
    entry = hosts.lookup("[10.0.0.5]:2222")
    assert host_key_verdict(entry, known) == "known"
    assert host_key_verdict(entry, other) == "changed"
    assert host_key_verdict(hosts.lookup("10.0.0.5"), known) == "unknown"  # port 22 is another entry
    ed25519 = paramiko.Ed25519Key.from_private_key_file(str(_ed25519_file(tmp_path)))
    assert host_key_verdict(entry, ed25519) == "changed"  # known by another type only: not trusted


def test_hashed_known_hosts_entries_are_found(tmp_path: Path, keys) -> None:
    known, _ = keys
    hashed = paramiko.HostKeys.hash_host("rig.example")
    hosts = load_known_hosts(str(known_hosts_file(tmp_path, hashed, known)))
    assert host_key_verdict(hosts.lookup("rig.example"), known) == "known"


def test_absent_known_hosts_lists_nothing(tmp_path: Path) -> None:
    assert load_known_hosts(str(tmp_path / "none")).lookup("x") is None


def test_unknown_and_changed_lines(keys) -> None:
    key, _ = keys
    unknown = unknown_key_line("rig2x-a", "10.0.0.5", 2222, "~/.ssh/known_hosts", key)
    assert unknown.startswith("host key of [10.0.0.5]:2222 is not in ~/.ssh/known_hosts")
    assert key.fingerprint in unknown and "ssh-keyscan -p 2222 10.0.0.5 >> ~/.ssh/known_hosts" in unknown
    assert "ssh_host_ecdsa_key.pub" in unknown
    changed = changed_key_line("rig2x-a", "10.0.0.5", 22, "~/.ssh/known_hosts", key)
    assert changed.startswith("REFUSED: the host key of 10.0.0.5 CHANGED")
    assert "ssh-keygen -f ~/.ssh/known_hosts -R '10.0.0.5'" in changed
    assert "\n" not in unknown + changed


def test_port_nothing_listens_on_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a loopback port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    line = host_key_problem("rig", "127.0.0.1", port, str(tmp_path / "known_hosts"), timeout=5)
    assert line == (f"no SSH answer from 127.0.0.1 port {port} within 5s (Connection refused); check that the rig "
                    "is on, the address and ssh_port in the inventory entry 'rig', and that sshd runs there")


def test_port_that_never_speaks_ssh_is_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as mute:  # accepts the TCP connection (kernel backlog), never sends a banner
        mute.bind(("127.0.0.1", 0))
        mute.listen(1)
        port = mute.getsockname()[1]
        line = host_key_problem("rig", "127.0.0.1", port, str(tmp_path / "known_hosts"), timeout=1)
    assert line is not None
    assert line.startswith(f"no SSH answer from 127.0.0.1 port {port} within 1s (the port answered, but no SSH")
    assert "Traceback" not in capfd.readouterr().err, "paramiko's handshake thread printed a traceback"


def test_connector_keeps_the_host_name() -> None:
    assert connector_host_name("rig2x-a") == "@rigforge/rig2x-a"
    assert list(RigSSHConnector.make_names_data("rig2x-a")) == [("rig2x-a", {}, [])]


def test_connector_targets_what_pyinfra_connects_to(tmp_path: Path) -> None:
    # ~/.ssh/config aliases resolve as pyinfra's client resolves them; a jump host skips the direct probe.
    from pyinfra.api import Config, Inventory, State

    config = tmp_path / "ssh_config"
    config.write_text("Host rigalias\n  HostName 127.0.0.1\n  Port 2200\n  UserKnownHostsFile /k/hosts\n"
                      "Host jumped\n  ProxyJump bastion\n")
    inventory = Inventory(([
        ("@rigforge/alias", {"ssh_hostname": "rigalias", "ssh_config_file": str(config)}),
        ("@rigforge/jumped", {"ssh_hostname": "jumped", "ssh_config_file": str(config)}),
        ("@rigforge/plain", {"ssh_hostname": "10.1.1.1", "ssh_port": 2222, "ssh_known_hosts_file": "/x/kh",
                             "ssh_config_file": str(config)}),
    ], {}))
    State(inventory, Config())
    targets = {host.name: host.connector.ssh_target() for host in inventory}
    assert targets == {"alias": ("127.0.0.1", 2200, "/k/hosts", False), "jumped": ("jumped", 22, None, True),
                       "plain": ("10.1.1.1", 2222, "/x/kh", False)}
    assert inventory.get_host("jumped").connector.first_contact_problem() is None


def _ed25519_file(tmp_path: Path) -> Path:
    from rigforge.sandbox.ssh import ensure_key_pair

    path = tmp_path / "id_ed25519"
    ensure_key_pair(path)
    return path


def test_shipped_inventory_without_its_key_file_is_one_line(tmp_path: Path) -> None:
    # The first contact: inventory/rig2x.py as shipped, on a machine with no ~/.ssh/id_ed25519 (HOME
    # points at an empty folder). The key file is checked before any connection: nothing is sent anywhere.
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-m", "pyinfra", "inventory/rig2x.py", "deploys/full.py", "--dry"],
                            cwd=root, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "HOME": str(tmp_path)})
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Traceback" not in output
    missing = tmp_path / ".ssh" / "id_ed25519"
    assert f"[rig2x-a] SSH key file {missing} does not exist; fix ssh_key in the inventory entry 'rig2x-a'" in output
    assert "pyinfra error: No hosts remaining!" in output


def test_first_contact_page_shows_the_lines_as_printed(tmp_path: Path) -> None:
    # docs/first-contact.md "What the first contact can end in" quotes each line exactly; the fingerprint there is
    # "SHA256:...".
    page = (Path(__file__).resolve().parents[2] / "docs" / "first-contact.md").read_text()
    key = paramiko.Ed25519Key.from_private_key_file(str(_ed25519_file(tmp_path)))
    known = "/root/.ssh/known_hosts"
    lines = [key_file_problem("rig2x-a", "/nonexistent-dir/id_ed25519") or "",
             unknown_key_line("rig2x-a", "192.0.2.10", 22, known, key),
             changed_key_line("rig2x-a", "192.0.2.10", 22, known, key),
             no_answer_line("rig2x-a", "192.0.2.10", 22, 10, "timed out")]
    for line in lines:
        shown = line.replace("/nonexistent-dir", "/root/.ssh").replace(key.fingerprint, "SHA256:...")
        assert f"[rig2x-a] {shown}" in page, shown
