"""pyinfra's SSH connector with rigforge's first-contact checks in front (``@rigforge/NAME`` inventory names).

``rig_host`` names each rig ``@rigforge/NAME``; pyinfra finds this connector through the
``pyinfra.connectors`` entry point and keeps ``NAME`` as the host's name. Before paramiko logs in, the key
file and the rig's host key are checked (``rigforge.first_contact``); a problem becomes pyinfra's
ConnectError, which pyinfra prints as one line for that host (``[NAME] ...``), drops that host from the run,
carries on with the others and exits non-zero at the end. Once the checks pass, connecting, sudo and file
transfer are pyinfra's own SSH connector, unchanged.

Example inventory entry (what ``rig_host`` returns)::

    ("@rigforge/rig2x-a", {"ssh_hostname": "192.0.2.10", "ssh_user": "root", "ssh_key": "/root/.ssh/rig"})
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyinfra.api.exceptions import ConnectError, PyinfraError
from pyinfra.connectors.ssh import SSHConnector

from rigforge.first_contact import host_key_problem, key_file_problem

#: The connector's name in inventories (``@rigforge/NAME``) and in the entry point group.
CONNECTOR_NAME = "rigforge"


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

    def first_contact_problem(self) -> str | None:
        """The one line saying why this rig must not be contacted, or None when it may."""
        name = self.host.name
        problem = key_file_problem(name, self.data["ssh_key"])
        if problem:
            return problem
        return host_key_problem(name, self.data["ssh_hostname"] or name, int(self.data["ssh_port"] or 22),
                                self.data["ssh_known_hosts_file"], float(self.state.config.CONNECT_TIMEOUT))
