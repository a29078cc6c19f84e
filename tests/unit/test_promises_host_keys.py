"""Promise: nothing runs on a rig whose host key known_hosts does not vouch for; the check is a real key exchange
with the rig, and each refusal is one line naming the host and the fix (rigforge/connection/first_contact.py,
rigforge/connection/verify_trust.py). The rig is a STAND-IN SSH server on 127.0.0.1 (paramiko's server side: a key
exchange needs no sshd) holding an ECDSA and an RSA host key (two types, as Debian's sshd holds); the whole path
against a sandbox host's real sshd: tests/e2e/test_verify_host_keys.py.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import paramiko
import pytest

from rigforge.connection.first_contact import changed_key_line, host_key_problem, no_answer_line, unknown_key_line
from rigforge.connection.verify_trust import HostKeyRefused, checked_client, host_key_refusal, ssh_target

HOST_KEYS = (paramiko.ECDSAKey.generate(), paramiko.RSAKey.generate(2048))


class StandInSshd:
    """A loopback SSH server that completes key exchanges with its host keys and nothing more."""

    def __init__(self, keys: tuple[paramiko.PKey, ...]) -> None:
        self.keys, self.listener = keys, socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.transports: list[paramiko.Transport] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            transport = paramiko.Transport(connection)
            for key in self.keys:
                transport.add_server_key(key)
            self.transports.append(transport)
            try:
                transport.start_server(server=paramiko.ServerInterface())
            except (paramiko.SSHException, EOFError, OSError):
                transport.close()

    def close(self) -> None:
        self.listener.close()
        for transport in self.transports:
            transport.close()


@pytest.fixture()
def rig() -> Iterator[StandInSshd]:
    server = StandInSshd(HOST_KEYS)
    yield server
    server.close()


def known_hosts(tmp_path: Path, port: int, *keys: paramiko.PKey) -> str:
    path = tmp_path / "known_hosts"
    lines = [f"[127.0.0.1]:{port} {key.get_name()} {key.get_base64()}" for key in keys]
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def test_a_rig_whose_key_known_hosts_lists_is_trusted_whichever_of_its_keys_is_listed(
        rig: StandInSshd, tmp_path: Path) -> None:
    ecdsa, rsa = HOST_KEYS
    assert host_key_problem("rig", "127.0.0.1", rig.port, known_hosts(tmp_path, rig.port, rsa), timeout=10) is None
    assert host_key_problem("rig", "127.0.0.1", rig.port, known_hosts(tmp_path, rig.port, ecdsa), timeout=10) is None


def test_an_unknown_rig_is_refused_with_the_key_it_showed(rig: StandInSshd, tmp_path: Path) -> None:
    path = known_hosts(tmp_path, rig.port)
    line = host_key_problem("rig", "127.0.0.1", rig.port, path, timeout=10)
    assert line == unknown_key_line("rig", "127.0.0.1", rig.port, path, HOST_KEYS[0])


def test_a_rig_whose_key_changed_is_refused(rig: StandInSshd, tmp_path: Path) -> None:
    path = known_hosts(tmp_path, rig.port, paramiko.RSAKey.generate(2048))
    line = host_key_problem("rig", "127.0.0.1", rig.port, path, timeout=10)
    assert line == changed_key_line("rig", "127.0.0.1", rig.port, path, HOST_KEYS[1])


def test_a_listed_key_of_port_22_does_not_vouch_for_another_port(rig: StandInSshd, tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(f"127.0.0.1 {HOST_KEYS[0].get_name()} {HOST_KEYS[0].get_base64()}\n")
    line = host_key_problem("rig", "127.0.0.1", rig.port, str(path), timeout=10)
    assert line == unknown_key_line("rig", "127.0.0.1", rig.port, str(path), HOST_KEYS[0])


def test_without_a_known_hosts_file_named_the_users_own_is_read(
        rig: StandInSshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    known_hosts(tmp_path / ".ssh", rig.port, HOST_KEYS[0])
    assert host_key_problem("rig", "127.0.0.1", rig.port, None, timeout=10) is None


def test_a_known_hosts_file_that_cannot_be_read_is_said(tmp_path: Path) -> None:
    bad = tmp_path / "known_hosts"
    bad.write_bytes(b"127.0.0.1 ssh-ed25519 \xff\xfe\n")
    line = host_key_problem("rig", "127.0.0.1", 22, str(bad), timeout=1)
    assert line is not None and line.startswith(f"cannot read known_hosts file {bad}: 'utf-8' codec can't decode")


def test_a_known_hosts_line_with_a_broken_key_is_said_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "known_hosts"
    bad.write_text("127.0.0.1 ssh-ed25519 not-base64!\n")
    line = host_key_problem("rig", "127.0.0.1", 22, str(bad), timeout=1)
    assert line is not None and line.startswith(f"cannot read known_hosts file {bad}: ")


def test_a_port_that_never_completes_a_connection_times_out_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as full:  # backlog full: the kernel drops further connection attempts
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        port = full.getsockname()[1]
        waiting = [socket.socket() for _ in range(4)]
        for connection in waiting:
            connection.setblocking(False)
            connection.connect_ex(("127.0.0.1", port))
        try:
            line = host_key_problem("rig", "127.0.0.1", port, str(tmp_path / "known_hosts"), timeout=0.5)
        finally:
            for connection in waiting:
                connection.close()
    assert line == no_answer_line("rig", "127.0.0.1", port, 0.5, "timed out")


def test_a_name_that_does_not_resolve_says_which_inventory_field_to_fix(tmp_path: Path) -> None:
    line = host_key_problem("rig", "no-such-rig.invalid", 22, str(tmp_path / "known_hosts"), timeout=1)
    assert line is not None and line.startswith("cannot resolve no-such-rig.invalid (")
    assert line.endswith("); fix ssh_hostname in the inventory entry 'rig'")


# --- the verify suite ------------------------------------------------------------------------------------------

def backend(tmp_path: Path, port: int, *keys: paramiko.PKey, proxied: bool = False) -> SimpleNamespace:
    """What the checks read of testinfra's ParamikoBackend: the host's name and port, its SSH config, the timeout."""
    config = tmp_path / "ssh_config"
    config.write_text(f"Host rig\n  HostName 127.0.0.1\n  UserKnownHostsFile {known_hosts(tmp_path, port, *keys)}\n"
                      + ("  ProxyCommand nc %h %p\n" if proxied else ""))
    return SimpleNamespace(host=SimpleNamespace(name="rig", port=str(port)), ssh_config=str(config), timeout=10)


def test_the_verify_suite_refuses_an_untrusted_rig_before_any_test(rig: StandInSshd, tmp_path: Path) -> None:
    assert host_key_refusal(backend(tmp_path, rig.port, HOST_KEYS[0])) is None
    stranger = backend(tmp_path, rig.port)
    target = ssh_target("rig", rig.port, stranger.ssh_config)
    assert host_key_refusal(stranger) == "[rig] " + unknown_key_line("rig", "127.0.0.1", rig.port,
                                                                     target.known_hosts, HOST_KEYS[0])
    assert host_key_refusal(backend(tmp_path, rig.port, proxied=True)) is None  # left to paramiko


def open_session(port: int) -> paramiko.SSHClient:
    """A connection as testinfra opens it, up to the key exchange (the stand-in authenticates nobody)."""
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.WarningPolicy())
    transport = paramiko.Transport(("127.0.0.1", port))
    transport.start_client(timeout=10)
    client._transport = transport  # noqa: SLF001 - paramiko's SSHClient keeps its transport there
    return client


def test_the_session_testinfra_opens_is_checked_again_before_any_command(rig: StandInSshd, tmp_path: Path) -> None:
    trusted = checked_client(lambda backend: open_session(rig.port))
    assert trusted(backend(tmp_path, rig.port, HOST_KEYS[0])).get_transport().is_active()
    changed = backend(tmp_path, rig.port, paramiko.ECDSAKey.generate())
    opened: list[paramiko.SSHClient] = []
    refused = checked_client(lambda backend: opened.append(open_session(rig.port)) or opened[-1])
    with pytest.raises(HostKeyRefused) as stopped:
        refused(changed)
    target = ssh_target("rig", rig.port, changed.ssh_config)
    assert str(stopped.value) == "[rig] " + changed_key_line("rig", "127.0.0.1", rig.port, target.known_hosts,
                                                             HOST_KEYS[0])
    assert opened[0].get_transport() is None or not opened[0].get_transport().is_active(), "left open"
    proxied = backend(tmp_path, rig.port, proxied=True)
    assert checked_client(lambda backend: open_session(rig.port))(proxied).get_transport().is_active()


def test_without_an_ssh_config_named_the_users_own_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text("Host rig\n  HostName 127.0.0.9\n  Port 2201\n  ProxyCommand nc %h %p\n")
    target = ssh_target("rig", None, None)
    assert (target.hostname, target.port, target.proxied) == ("127.0.0.9", 2201, True)
    assert target.known_hosts == str(tmp_path / ".ssh" / "known_hosts")
