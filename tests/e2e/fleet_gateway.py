"""Sandbox rigs behind the fleet's gateway: their inventory (each rig its own key, the first also the gateway) and
what the gateway says of them. Shared by the gateway e2e and the driver rollout's fleet (one set of three rigs).

Example::

    inventory = write_fleet_inventory(tmp / "fleet.py", sandbox, rigs, tmp, E2E_OVERRIDES)
    run_pyinfra(inventory, "deploys/serve.py"); run_pyinfra(inventory, "deploys/gateway.py")
    wait_for(rigs[0], rigs[1].name, "UP")
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rigforge.sandbox import SandboxError, SandboxHost, exec_in
from rigforge.sandbox.docker import docker, inspect_container
from rigforge.serving.engines import UNIT_NAME
from tests.e2e.conftest import merged_overrides

if TYPE_CHECKING:
    from tests.e2e.conftest import Sandbox

MODEL = "gemma-3-270m"
#: The engines listen beyond the rig (the gateway is another host), each behind its own API key.
RIG_OVERRIDES = {"engine": {"host": "0.0.0.0"}}
#: Fast health checks (a hung engine is out of rotation in about 2 s), two users' keys.
GATEWAY = {"install": True, "listen_host": "0.0.0.0", "users": ["alice", "bob"], "response_timeout_s": 60,
           "health": {"interval_s": 1, "timeout_s": 1, "fall": 2, "rise": 2}, "drain_timeout_s": 30}
GATEWAY_PORT = 8090  # the profile's gateway.port
RUNTIME = "python3 /opt/rigforge/lib/gateway_runtime.py"


#: The name of a fleet's own Docker network (``fixed_addresses``), its session's suffix after it.
FLEET_NETWORK_PREFIX = "rigforge-fleet-"


def address(host: SandboxHost) -> str:
    """The host's address where the other hosts reach it: on its fleet's network when it has one, else Docker's."""
    info = inspect_container(host.container)
    assert info is not None
    fleet = [net for name, net in info["NetworkSettings"]["Networks"].items() if name.startswith(FLEET_NETWORK_PREFIX)]
    return str((fleet[0] if fleet else info["NetworkSettings"])["IPAddress"])


@contextmanager
def fixed_addresses(rigs: list[SandboxHost], suffix: str) -> Iterator[None]:
    """Each rig at a fixed address on a network of the fleet's own for the ``with`` block, which a reboot keeps.

    Docker gives a restarted container the next free address of its default bridge, so a rig rebooted by a driver
    update can come back at another rig's address, and the gateway, which reaches rigs by address, sends one rig's
    traffic to another (seen: roll3 hung with SIGSTOP stayed UP while roll2 timed out). A real rig has a static
    address; this is its stand-in.
    """
    network = FLEET_NETWORK_PREFIX + suffix
    for third in range(200, 255):  # the first /24 no other network of this machine holds
        if docker("network", "create", "--subnet", f"172.31.{third}.0/24", network, check=False).returncode == 0:
            break
    else:
        raise SandboxError(f"no free 172.31.200-254.0/24 subnet for the network {network}")
    try:
        for index, rig in enumerate(rigs):
            docker("network", "connect", "--ip", f"172.31.{third}.{10 + index}", network, rig.container)
        yield
    finally:
        for rig in rigs:
            docker("network", "disconnect", "-f", network, rig.container, check=False)
        docker("network", "rm", network, check=False)


def write_fleet_inventory(path: Path, sandbox: Sandbox, rigs: list[SandboxHost], key_dir: Path,
                          overrides: dict) -> Path:
    """The rigs with ``overrides`` and ``RIG_OVERRIDES``, each with its own key file in ``key_dir`` (kept when it is
    there: an old and a new inventory of one fleet share them); the first rig also the gateway."""
    rig_overrides = merged_overrides(overrides, RIG_OVERRIDES)
    gateway_overrides = merged_overrides(rig_overrides, {"gateway": GATEWAY})
    entries = []
    for index, rig in enumerate(rigs):
        key = key_dir / rig.name
        if not key.exists():
            key.write_text(f"key-of-{rig.name}-{index}\n")
            key.chmod(0o600)
        entries.append((rig.name, gateway_overrides if index == 0 else rig_overrides,
                        {"api_key_file": str(key), "gateway_address": address(rig)}))
    path.write_text(
        "from rigforge.inventory import sandbox_hosts\n\n"
        f"_ENTRIES = {entries!r}  # underscored: not an inventory group of its own\n"
        "hosts = [(name, {**data, **extra}) for rig, overrides, extra in _ENTRIES\n"
        f"         for name, data in sandbox_hosts({str(sandbox.state_dir)!r}, 'sandbox', overrides, names=[rig])]\n")
    return path


def who_serves(gateway: SandboxHost) -> list[dict]:
    """The gateway's rows: one per rig of every model, with its status (UP, DOWN, MAINT…)."""
    shown = exec_in(gateway, f"{RUNTIME} show")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def wait_for(gateway: SandboxHost, rig: str, status: str, timeout_s: float = 60) -> None:
    """Until the gateway says ``rig`` is ``status`` (a prefix: "UP" matches "UP 1/2")."""
    deadline = time.monotonic() + timeout_s
    while not any(row["rig"] == rig and row["status"].startswith(status) for row in who_serves(gateway)):
        assert time.monotonic() < deadline, f"{rig} never {status}: {who_serves(gateway)}"
        time.sleep(0.5)


def gateway_url(gateway: SandboxHost) -> str:
    return f"http://{address(gateway)}:{GATEWAY_PORT}"


def user_key(gateway: SandboxHost, user: str) -> str:
    """A client's key, read on the gateway host (root-only there)."""
    return exec_in(gateway, f"cat /etc/rigforge/secrets/gateway/users/{user}").stdout.strip()


def signal(host: SandboxHost, name: str) -> None:
    """Send signal ``name`` to every process of the engine's unit on ``host``."""
    sent = exec_in(host, f"systemctl kill --signal={name} {UNIT_NAME}")
    assert sent.returncode == 0, f"{host.name}: systemctl kill --signal={name}: {sent.stdout}{sent.stderr}"


def engine_restarts(host: SandboxHost) -> int:
    """How often systemd has started the engine's unit again on ``host`` (its NRestarts)."""
    shown = exec_in(host, f"systemctl show -p NRestarts --value {UNIT_NAME}")
    return int(shown.stdout.strip() or 0)


#: Docker's CPU weight of a rig serving the load while another is measured (out of rotation: Docker's default 1024).
SERVING_CPU_SHARES = 128


def cpu_as_if_apart(rigs: list[SandboxHost], gateway: SandboxHost, stop: threading.Event) -> None:
    """Real rigs each have their own CPUs; here three share two. Until ``stop``, the rig out of the gateway's rotation
    (the one whose starts are being measured) gets Docker's full CPU weight and the rigs serving the load a
    fraction of it, so the load the others serve does not land in its measurement. (The run that showed 59 tok/s
    before and 7.6 after without it also had the rigs at swapped addresses, fixed since by ``fixed_addresses``: how
    much of that drop was the load alone is not measured.) A weight, not a cap: a rig alone still gets every CPU."""
    weights: dict[str, int] = {}
    while not stop.wait(1.0):
        try:
            out = {row["rig"] for row in who_serves(gateway) if row["status"].startswith("MAINT")}
        except (AssertionError, SandboxError, ValueError):  # the gateway's host rebooting
            continue
        for host in rigs:
            weight = 1024 if host.name in out or not out else SERVING_CPU_SHARES
            if weights.get(host.name) != weight:
                docker("update", "--cpu-shares", str(weight), host.container)
                weights[host.name] = weight
    for host in rigs:
        docker("update", "--cpu-shares", "1024", host.container)
