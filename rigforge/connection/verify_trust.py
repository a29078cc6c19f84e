"""The verify suite trusts a rig's host key as the deploys do (tests/verify/conftest.py uses this).

testinfra's paramiko backend (pytest-testinfra 10.2.2, ``backend/paramiko.py``) loads no known_hosts and
accepts any host key with a warning (``WarningPolicy``): ``pytest --hosts=paramiko://rig2x-a tests/verify``
would verify whatever answers at that address. Here, before any test runs, each paramiko host's key is
checked the way ``rigforge.connection.first_contact`` checks a rig before a deploy (a bare key exchange: nothing is
authenticated or run) against the known_hosts its SSH config names (``UserKnownHostsFile``, else
``~/.ssh/known_hosts``); an unknown or changed key stops the suite with the deploys' own line for that host.
The connection testinfra then opens is checked again, before any command, against the same file: a key that
changed in between is refused too. ``StrictHostKeyChecking no`` in the SSH config does not turn this off:
rigforge keeps host-key checking on for real rigs. Hosts behind ProxyJump/ProxyCommand are left to paramiko.

Example::

    problem = host_key_refusal(backend)      # a testinfra ParamikoBackend, before it connects
    if problem:
        pytest.exit(problem, returncode=1)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import paramiko

from rigforge.connection.first_contact import (
    DEFAULT_KNOWN_HOSTS,
    changed_key_line,
    host_key_problem,
    host_key_verdict,
    known_hosts_name,
    load_known_hosts,
    unknown_key_line,
)


class HostKeyRefused(Exception):
    """The rig's host key is not the one known_hosts lists: nothing may run on it."""


@dataclass(frozen=True)
class SshTarget:
    """Where testinfra's paramiko backend connects, and the known_hosts that must vouch for it."""

    name: str
    hostname: str
    port: int
    known_hosts: str
    proxied: bool


def ssh_target(name: str, port: str | int | None, ssh_config: str | None) -> SshTarget:
    """Resolve a testinfra host as its paramiko backend does: the SSH config (``--ssh-config``, else
    ``~/.ssh/config``) for HostName, Port and UserKnownHostsFile; a port in the host spec wins (pure but for
    reading that file).

    + name: the host spec's name (``rig2x-a`` of ``paramiko://rig2x-a``)
    + port: the host spec's port, when it gives one
    + ssh_config: the file given with ``--ssh-config``, or None
    """
    path = os.path.expanduser(ssh_config or "~/.ssh/config")
    entry: dict[str, Any] = {}
    if os.path.isfile(path):
        entry = paramiko.SSHConfig.from_path(path).lookup(name)
    known = (entry.get("userknownhostsfile") or DEFAULT_KNOWN_HOSTS).split()[0]
    return SshTarget(name=name, hostname=entry.get("hostname", name),
                     port=int(port or entry.get("port") or 22), known_hosts=os.path.expanduser(known),
                     proxied="proxycommand" in entry or "proxyjump" in entry)


def backend_target(backend: Any) -> SshTarget:
    """The ``SshTarget`` of a testinfra ``ParamikoBackend``."""
    return ssh_target(backend.host.name, backend.host.port, backend.ssh_config)


def host_key_refusal(backend: Any) -> str | None:
    """``[NAME] line`` when the host's key must not be trusted (or it did not answer), else None."""
    target = backend_target(backend)
    if target.proxied:
        return None
    problem = host_key_problem(target.name, target.hostname, target.port, target.known_hosts,
                               float(backend.timeout))
    return f"[{target.name}] {problem}" if problem else None


def session_key_refusal(target: SshTarget, server_key: paramiko.PKey) -> str | None:
    """``[NAME] line`` when the key of an open session is not the known one, else None (pure but for
    reading known_hosts)."""
    known = load_known_hosts(target.known_hosts).lookup(known_hosts_name(target.hostname, target.port))
    verdict = host_key_verdict(known, server_key)
    if verdict == "known":
        return None
    line = unknown_key_line if verdict == "unknown" else changed_key_line
    return f"[{target.name}] {line(target.name, target.hostname, target.port, target.known_hosts, server_key)}"


def checked_client(connect: Any) -> Any:
    """Wrap testinfra's ``ParamikoBackend.client`` body: the open session's host key is checked before any
    command; an untrusted one closes the connection and raises ``HostKeyRefused``."""

    def client(backend: Any) -> paramiko.SSHClient:
        opened = connect(backend)
        target = backend_target(backend)
        transport = opened.get_transport()
        refusal = None if target.proxied or transport is None else session_key_refusal(
            target, transport.get_remote_server_key())
        if refusal:
            opened.close()
            raise HostKeyRefused(refusal)
        return opened

    return client
