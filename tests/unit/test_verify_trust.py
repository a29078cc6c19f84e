"""How the verify suite decides whether to trust a rig's host key (rigforge/connection/verify_trust.py): the SSH config
resolved as testinfra's paramiko backend reads it, and an open session's key judged against known_hosts with
real keys (made here with paramiko). The whole path, on a sandbox host whose key changed:
tests/e2e/test_verify_host_keys.py."""

from __future__ import annotations

from pathlib import Path

import paramiko

from rigforge.connection.first_contact import changed_key_line, unknown_key_line
from rigforge.connection.verify_trust import SshTarget, session_key_refusal, ssh_target

CONFIG = """Host rig2x-a
  HostName 192.0.2.10
  Port 2222
  UserKnownHostsFile {known} /etc/ssh/ssh_known_hosts
  StrictHostKeyChecking no
Host behind
  ProxyJump bastion
"""


def test_the_target_comes_from_the_ssh_config_as_testinfra_reads_it(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(CONFIG.format(known=tmp_path / "known_hosts"))
    # StrictHostKeyChecking no does not turn the check off: rigforge keeps it on for real rigs.
    assert ssh_target("rig2x-a", None, str(config)) == SshTarget("rig2x-a", "192.0.2.10", 2222,
                                                                 str(tmp_path / "known_hosts"), False)
    assert ssh_target("rig2x-a", "2200", str(config)).port == 2200  # a port in the host spec wins
    assert ssh_target("behind", None, str(config)).proxied
    plain = ssh_target("elsewhere", None, str(tmp_path / "none"))
    assert (plain.hostname, plain.port, plain.known_hosts) == ("elsewhere", 22, str(Path("~/.ssh/known_hosts")
                                                                                    .expanduser()))


def test_an_open_sessions_key_must_be_the_known_one(tmp_path: Path) -> None:
    known_key, other_key = paramiko.RSAKey.generate(2048), paramiko.RSAKey.generate(2048)
    known = tmp_path / "known_hosts"
    known.write_text(f"[192.0.2.10]:2222 {known_key.get_name()} {known_key.get_base64()}\n")
    target = SshTarget("rig2x-a", "192.0.2.10", 2222, str(known), False)
    assert session_key_refusal(target, known_key) is None
    assert session_key_refusal(target, other_key) == (
        f"[rig2x-a] {changed_key_line('rig2x-a', '192.0.2.10', 2222, str(known), other_key)}")
    known.write_text("")
    assert session_key_refusal(target, known_key) == (
        f"[rig2x-a] {unknown_key_line('rig2x-a', '192.0.2.10', 2222, str(known), known_key)}")
