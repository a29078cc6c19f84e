"""Sandbox hosts: real Debian 12 systemd hosts in Docker containers, reached over SSH on 127.0.0.1.

``hosts`` starts, resets, reboots and removes them; ``state`` is their record (``state.json``), ``docker``
and ``image`` the container engine and the debootstrap image, ``ssh`` keys and known_hosts, ``model`` the
sandbox rig's small model. The names below are the ones tests and inventories use.

May import: no other rigforge package (the lowest layer).
"""

from rigforge.sandbox.docker import SandboxError, ensure_docker
from rigforge.sandbox.hosts import boot_token, down, exec_in, reset, status, up, wait_rebooted
from rigforge.sandbox.image import build_image
from rigforge.sandbox.state import SandboxHost, SandboxState, load_state

__all__ = ["SandboxError", "SandboxHost", "SandboxState", "boot_token", "build_image", "down", "ensure_docker",
           "exec_in", "load_state", "reset", "status", "up", "wait_rebooted"]
