"""pyinfra's SSH connector with rigforge's first-contact checks in front (``@rigforge/NAME`` inventory names).

``rig_host`` names each rig ``@rigforge/NAME``; pyinfra finds this connector through the
``pyinfra.connectors`` entry point and keeps ``NAME`` as the host's name. Before paramiko logs in, the key
file and the rig's host key are checked (``rigforge.connection.first_contact``); a problem becomes pyinfra's
ConnectError, which pyinfra prints as one line for that host (``[NAME] ...``), drops that host from the run,
carries on with the others and exits non-zero at the end. Once the checks pass, connecting, sudo and file
transfer are pyinfra's own SSH connector, with two additions for a rig that goes away mid-run:

- the connection is kept under watch (``keep_watch``): an SSH keepalive every 15 s, and the kernel gives up on
  the TCP connection once sent data has gone unacknowledged for 60 s, so a rig whose network drops silently (no
  FIN, no RST: a cable, a switch, a laptop's Wi-Fi) is found lost within about a minute instead of never;
- a lost connection is one line for that rig (``rigforge.connection.lost``, which watches every SSH host of a
  deploy, this connector's and the sandbox's).

Example inventory entry (what ``rig_host`` returns)::

    ("@rigforge/rig2x-a", {"ssh_hostname": "192.0.2.10", "ssh_user": "root", "ssh_key": "/root/.ssh/rig"})
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import paramiko
from pyinfra.api.exceptions import ConnectError, PyinfraError
from pyinfra.connectors.ssh import SSHConnector
from pyinfra.connectors.sshuserclient.client import SSHClient, get_ssh_config

from rigforge.connection.first_contact import host_key_problem, key_file_problem

#: The connector's name in inventories (``@rigforge/NAME``) and in the entry point group.
CONNECTOR_NAME = "rigforge"
#: Seconds between SSH keepalives (sent while a long command prints nothing).
KEEPALIVE_S = 15
#: Seconds sent data may stay unacknowledged before the kernel drops the connection (Linux TCP_USER_TIMEOUT).
UNACKNOWLEDGED_LIMIT_S = 60


def connector_host_name(name: str) -> str:
    """The inventory name that routes ``name`` through this connector."""
    return f"@{CONNECTOR_NAME}/{name}"


class RigSSHConnector(SSHConnector):
    """SSH to a real rig, refusing with one line on a missing key file, an unknown or changed host key, silence."""

    @staticmethod
    def make_names_data(name: str | None = None) -> Iterator[tuple[str, dict[str, Any], list[str]]]:
        if not name:
            raise PyinfraError(f"@{CONNECTOR_NAME} needs a host name: @{CONNECTOR_NAME}/NAME")
        yield name, {}, []

    def connect(self) -> None:
        problem = self.first_contact_problem()
        if problem:
            raise ConnectError(problem)
        try:
            super().connect()
        except ConnectError:
            raise
        except PyinfraError as exc:  # the key file went bad after the check, or is encrypted / not a key
            raise ConnectError(str(exc)) from None
        if self.client is not None:
            keep_watch(self.client.get_transport())

    def first_contact_problem(self) -> str | None:
        """The one line saying why this rig must not be contacted, or None when it may."""
        name = self.host.name
        problem = key_file_problem(name, self.data["ssh_key"])
        if problem:
            return problem
        hostname, port, known_hosts, proxied = self.ssh_target()
        if proxied:  # reached through a jump host: pyinfra's own connection checks the host key
            return None
        return host_key_problem(name, hostname, port, known_hosts, float(self.state.config.CONNECT_TIMEOUT))

    def ssh_target(self) -> tuple[str, int, str | None, bool]:
        """Where pyinfra will connect, as its SSH client decides: host data over ~/.ssh/config (or ssh_config_file).

        Returns (hostname, port, known_hosts file, whether a ProxyJump/ProxyCommand stands in between).
        """
        name = self.data["ssh_hostname"] or self.host.name
        config_file = self.data["ssh_config_file"]
        ssh_config = get_ssh_config(config_file)
        host_config = ssh_config.lookup(name) if ssh_config else {}
        if "proxyjump" in host_config or "proxycommand" in host_config:
            return name, 22, None, True  # parse_config would already open the jump connection
        hostname, config, _agent, _policy, known_hosts_files, _alive, _identity = SSHClient().parse_config(
            name, ssh_config_file=config_file)
        port = int(self.data["ssh_port"] or config.get("port") or 22)
        known_hosts = self.data["ssh_known_hosts_file"] or (known_hosts_files[0] if known_hosts_files else None)
        return hostname, port, known_hosts, False


def keep_watch(transport: paramiko.Transport | None, keepalive_s: int = KEEPALIVE_S,
               unacknowledged_limit_s: int = UNACKNOWLEDGED_LIMIT_S) -> None:
    """Make a silent network drop end the connection: SSH keepalives, and a limit on unacknowledged data.

    + transport: the connected SSH transport (a proxied one keeps its ProxyCommand's own socket as it is)
    + keepalive_s: seconds between keepalives when nothing else is sent
    + unacknowledged_limit_s: seconds before the kernel drops a connection whose sent data nobody acknowledges

    A keepalive nobody acknowledges then ends the TCP connection, paramiko's transport dies with it, and the
    command under way ends; without both, a command on a rig that vanished silently waits forever.
    """
    if transport is None:
        return
    transport.set_keepalive(keepalive_s)
    sock = transport.sock
    if isinstance(sock, socket.socket) and hasattr(socket, "TCP_USER_TIMEOUT"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, unacknowledged_limit_s * 1000)
