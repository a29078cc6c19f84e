"""SSH credentials of the sandbox hosts: the client key pair, known_hosts, and a strict login check.

The known_hosts file lists each host as ``[127.0.0.1]:PORT ssh-ed25519 AAAA...``, the form OpenSSH
and paramiko look up for a non-default port, so clients keep strict host-key checking on.

Example::

    public_key = ensure_key_pair(Path(".sandbox/id_ed25519"))
    update_known_hosts(Path(".sandbox/known_hosts"), {2222: host_key_line(2222, "ssh-ed25519 AAAA...")})
    rc, out = ssh_run(2222, Path(".sandbox/id_ed25519"), Path(".sandbox/known_hosts"), "hostname")
"""

from __future__ import annotations

import os
from pathlib import Path

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

KEY_COMMENT = "rigforge-sandbox"


def ensure_key_pair(key_path: Path) -> str:
    """Create an ed25519 key pair at ``key_path`` (0600) and ``.pub`` unless present; return the public line."""
    pub_path = key_path.with_name(key_path.name + ".pub")
    if not key_path.exists():
        key = Ed25519PrivateKey.generate()
        private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                    serialization.NoEncryption())
        # Created with 0600 from the start: the private key is never readable by others, not even briefly.
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(private)
        public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                               serialization.PublicFormat.OpenSSH)
        pub_path.write_text(f"{public.decode()} {KEY_COMMENT}\n")
    os.chmod(key_path, 0o600)
    return pub_path.read_text()


def known_hosts_name(port: int) -> str:
    """Return the known_hosts host name of 127.0.0.1 at ``port``."""
    return f"[127.0.0.1]:{port}"


def host_key_line(port: int, public_key: str) -> str:
    """Return the known_hosts line for a host key (``ssh-ed25519 AAAA... [comment]``) at ``port``."""
    key_type, key_b64 = public_key.split()[:2]
    return f"{known_hosts_name(port)} {key_type} {key_b64}"


def merge_known_hosts(text: str, updates: dict[int, str | None]) -> str:
    """Return known_hosts ``text`` with the lines of each updated port replaced (or dropped when None)."""
    replaced = {known_hosts_name(port) for port in updates}
    kept = [line for line in text.splitlines() if line.strip() and line.split()[0] not in replaced]
    added = [line for line in updates.values() if line]
    return "".join(f"{line}\n" for line in kept + added)


def update_known_hosts(path: Path, updates: dict[int, str | None]) -> None:
    """Apply ``updates`` (port -> known_hosts line, or None to drop) to the file at ``path``."""
    text = path.read_text() if path.exists() else ""
    path.write_text(merge_known_hosts(text, updates))


def ssh_client(port: int, key_path: Path, known_hosts_path: Path, timeout: float = 30) -> paramiko.SSHClient:
    """An SSH session as root to the sandbox host on ``port``, host key checked against ``known_hosts_path``."""
    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts_path))
    # Strict: an unknown or changed host key is an error, never accepted.
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect("127.0.0.1", port=port, username="root", key_filename=str(key_path),
                   look_for_keys=False, allow_agent=False, timeout=timeout, banner_timeout=timeout,
                   auth_timeout=timeout)
    return client


def ssh_run(port: int, key_path: Path, known_hosts_path: Path, command: str,
            timeout: float = 30, wait: bool = True) -> tuple[int, str]:
    """Run ``command`` as root over SSH with strict host-key checking; return (exit status, output).

    + wait: False returns (-1, "") as soon as the command is sent (for ``systemctl reboot``)
    """
    client = ssh_client(port, key_path, known_hosts_path, timeout)
    try:
        _stdin, stdout, stderr = client.exec_command(command, timeout=timeout)
        if not wait:
            return -1, ""
        output = stdout.read().decode(errors="replace") + stderr.read().decode(errors="replace")
        return stdout.channel.recv_exit_status(), output
    finally:
        client.close()


def ssh_login_works(port: int, key_path: Path, known_hosts_path: Path) -> bool:
    """Return True when root logs in over SSH with strict host-key checking and runs ``true``."""
    try:
        return ssh_run(port, key_path, known_hosts_path, "true", timeout=10)[0] == 0
    except (OSError, EOFError, paramiko.SSHException):
        return False
