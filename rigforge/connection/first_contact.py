"""First contact with a rig: the checks made before pyinfra logs in, each ending in one line that says the fix.

A real rig meets a new controller with a missing key file, a host key not yet in known_hosts, a host key
that changed (a reinstalled rig, or someone in the middle) or silence. Each is found here before paramiko
authenticates, so pyinfra reports it as one line for that host and carries on with the others
(``rigforge.connection.connector`` raises it as pyinfra's ConnectError).

The host-key check is a bare SSH key exchange: it reads only the server's public host key (no
authentication, no command) and compares it with known_hosts the way paramiko's own client does.

Example::

    problem = key_file_problem("rig2x-a", "~/.ssh/id_ed25519")
    if problem is None:
        problem = host_key_problem("rig2x-a", "192.0.2.10", 22, "~/.ssh/known_hosts", timeout=10)
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

import paramiko

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
_QUIET_LOG = "rigforge.connection.first_contact.handshake"
logging.getLogger(_QUIET_LOG).addHandler(logging.NullHandler())
logging.getLogger(_QUIET_LOG).propagate = False


def known_hosts_name(hostname: str, port: int) -> str:
    """The name OpenSSH and paramiko look up in known_hosts: ``host`` on port 22, ``[host]:port`` otherwise."""
    return hostname if port == 22 else f"[{hostname}]:{port}"


def fingerprint(key: paramiko.PKey) -> str:
    """The key's SHA256 fingerprint as ``ssh-keygen -lf`` prints it (``SHA256:...``)."""
    return key.fingerprint


def key_file_problem(name: str, ssh_key: str | None) -> str | None:
    """Return the line saying why the inventory entry's key file cannot be used, or None when it can.

    + name: inventory name of the host
    + ssh_key: the entry's ``ssh_key`` (None: the SSH agent / ~/.ssh defaults, nothing to check)
    """
    if not ssh_key:
        return None
    path = Path(ssh_key).expanduser()
    fix = (f"fix ssh_key in the inventory entry {name!r} to name the private key that logs in to the rig, "
           f"or create one (ssh-keygen -t ed25519 -f {path}) and add its .pub to the rig's authorized_keys")
    if not path.exists():
        return f"SSH key file {path} does not exist; {fix}"
    if not path.is_file():
        return f"SSH key file {path} is not a file; {fix}"
    if not os.access(path, os.R_OK):
        return (f"SSH key file {path} is not readable by this user; "
                f"make it readable (chmod 600 {path}, owned by you) or fix ssh_key in the inventory entry {name!r}")
    return None


def host_key_verdict(known: paramiko.hostkeys.HostKeyEntry | dict[str, paramiko.PKey] | None,
                     server_key: paramiko.PKey) -> str:
    """``"known"``, ``"unknown"`` or ``"changed"``: the server's key against the keys known_hosts lists for it.

    Same rule as paramiko's client: no entry is unknown; a different key of the type the server showed, or
    no key of that type beside keys of other types, is a changed key.
    """
    if not known:
        return "unknown"
    return "known" if known.get(server_key.get_name()) == server_key else "changed"


def unknown_key_line(name: str, hostname: str, port: int, known_hosts: str, server_key: paramiko.PKey) -> str:
    """The line for a host key that known_hosts does not list: what the rig showed and how to add it."""
    return (f"host key of {known_hosts_name(hostname, port)} is not in {known_hosts} (rigforge never "
            f"accepts an unknown host key); it showed {server_key.get_name()} {fingerprint(server_key)}: compare "
            f"it with what ssh-keygen -lf /etc/ssh/ssh_host_{_key_file_type(server_key)}_key.pub prints on the "
            f"rig's console, then add it: ssh-keyscan -p {port} {hostname} >> {known_hosts} "
            f"(or log in once: ssh -p {port} USER@{hostname}, and answer yes only if the fingerprints match)")


def changed_key_line(name: str, hostname: str, port: int, known_hosts: str, server_key: paramiko.PKey) -> str:
    """The line for a host key that differs from the one known_hosts lists: refuse, say so plainly."""
    entry = known_hosts_name(hostname, port)
    return (f"REFUSED: the host key of {entry} CHANGED (it now shows {server_key.get_name()} "
            f"{fingerprint(server_key)}, not the key in {known_hosts}): either the rig was reinstalled or "
            f"someone is intercepting the connection; confirm the new fingerprint on the rig's console "
            f"(ssh-keygen -lf /etc/ssh/ssh_host_{_key_file_type(server_key)}_key.pub), then "
            f"ssh-keygen -f {known_hosts} -R '{entry}' and add the new key (ssh-keyscan -p {port} {hostname})")


def no_answer_line(name: str, hostname: str, port: int, timeout: float, reason: str) -> str:
    """The line for a rig that does not answer SSH within the timeout."""
    return (f"no SSH answer from {hostname} port {port} within {timeout:g}s ({reason}); check that the "
            f"rig is on, the address and ssh_port in the inventory entry {name!r}, and that sshd runs there")


def _key_file_type(key: paramiko.PKey) -> str:
    """The ``ssh_host_<type>_key`` name part of a host key type (ssh-ed25519 -> ed25519)."""
    name = key.get_name()
    if name.startswith("ecdsa"):
        return "ecdsa"
    return name.removeprefix("ssh-").removesuffix("-cert-v01@openssh.com")


def load_known_hosts(path: str) -> paramiko.HostKeys:
    """known_hosts as paramiko reads it (hashed entries included); an absent file lists nothing."""
    host_keys = paramiko.HostKeys()
    expanded = Path(path).expanduser()
    if expanded.is_file():
        host_keys.load(str(expanded))
    return host_keys


def fetch_server_key(hostname: str, port: int, timeout: float, preferred_types: list[str]) -> paramiko.PKey:
    """Run a bare SSH key exchange with the rig and return its host key (nothing authenticated, nothing run).

    + preferred_types: host key types to ask for first (the ones known_hosts lists, as paramiko's client does)
    """
    sock = socket.create_connection((hostname, port), timeout=timeout)
    transport = paramiko.Transport(sock)
    # paramiko logs a failed handshake with a traceback from its own thread; the caller reports it in one line.
    transport.set_log_channel(_QUIET_LOG)
    try:
        transport.banner_timeout = timeout
        if preferred_types:
            options = transport.get_security_options()
            options.key_types = preferred_types + [t for t in options.key_types if t not in preferred_types]
        transport.start_client(timeout=timeout)
        return transport.get_remote_server_key()
    finally:
        transport.close()


def host_key_problem(name: str, hostname: str, port: int, known_hosts: str | None, timeout: float) -> str | None:
    """Return the line saying why the rig's host key cannot be trusted (or why it did not answer), else None.

    + name: inventory name of the host
    + hostname, port: where SSH reaches the rig
    + known_hosts: the known_hosts file checked (None: ~/.ssh/known_hosts)
    + timeout: seconds to wait for the connection and the key exchange (pyinfra's connect timeout)
    """
    known_hosts = known_hosts or DEFAULT_KNOWN_HOSTS
    try:
        known = load_known_hosts(known_hosts).lookup(known_hosts_name(hostname, port))
    except (OSError, paramiko.SSHException, paramiko.hostkeys.InvalidHostKey, ValueError) as exc:
        return f"cannot read known_hosts file {known_hosts}: {exc}"
    # paramiko's client puts the first known type first; the server then shows that key if it has one.
    preferred = list(known.keys())[:1] if known else []
    try:
        server_key = fetch_server_key(hostname, port, timeout, preferred)
    except socket.gaierror as exc:
        return (f"cannot resolve {hostname} ({exc.strerror}); fix ssh_hostname in the inventory "
                f"entry {name!r}")
    except TimeoutError:
        return no_answer_line(name, hostname, port, timeout, "timed out")
    except OSError as exc:
        return no_answer_line(name, hostname, port, timeout, exc.strerror or str(exc))
    except (EOFError, paramiko.SSHException):
        return no_answer_line(name, hostname, port, timeout, "the port answered, but no SSH handshake")
    verdict = host_key_verdict(known, server_key)
    if verdict == "unknown":
        return unknown_key_line(name, hostname, port, known_hosts, server_key)
    if verdict == "changed":
        return changed_key_line(name, hostname, port, known_hosts, server_key)
    return None

