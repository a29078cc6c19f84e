"""Gateway role (optional): the fleet's one endpoint, HAProxy on the host whose profile sets ``gateway.install``.

Every rig of the run's inventory is routed under its ``engine.served_model_name`` (one backend per model), reached
at its host data ``gateway_address`` (else its SSH host name; the gateway host's own engine at loopback). A rig
whose engine listens on loopback only, on another host, cannot be reached: it is left out, and the run says so.
Clients need a key of the gateway's (one per user of ``gateway.users``, made on this host once, never printed);
a rig's engine key comes from the same source as the rig's own copy (``RIGFORGE_API_KEY``, or the rig's host
data ``api_key_file`` on this machine) and is written root-only on this host. HAProxy's configuration holds no
secret, so its diff is shown whole. A changed configuration or key is a reload (requests in flight finish); a
changed unit or package a restart.
"""

from __future__ import annotations

import os
import re
from typing import Any

from pyinfra import host, inventory, logger
from pyinfra.api import deploy
from pyinfra.operations import files, systemd

from rigforge.checks.tradeoffs import gateway_beyond_loopback
from rigforge.context import current_profile
from rigforge.gateway.haproxy import (
    CONFIG_FILE,
    GATEWAY_DIR,
    STATE_FILE,
    UNIT,
    USER_KEY_DIR,
    GatewayRig,
    Route,
    group_routes,
    render_haproxy_config,
)
from rigforge.operations import apt
from rigforge.operations.files import managed_file
from rigforge.operations.followup import follow_up
from rigforge.operations.secrets import given_secret_line, read_local_secret, rig_secret_file
from rigforge.profile import Profile
from rigforge.profile.access import listens_beyond_loopback
from rigforge.render import render
from rigforge.serving.api_key import CONTROLLER_VARIABLE, HOST_DATA_FILE, needs_api_key
from rigforge.serving.engines import REMOTE_LIB_DIR
from roles.prometheus import inventory_profiles, rig_name
from roles.weights import upload_remote_script

RUNTIME_SCRIPT = "gateway_runtime.py"
UNIT_FILE = f"/etc/systemd/system/{UNIT}"
#: The environment variable on this machine that gives a user's gateway key (else one is made on the host).
USER_KEY_VARIABLE = "RIGFORGE_GATEWAY_KEY_{user}"


def server_name(rig: Any) -> str:
    """The rig's name at the gateway: its inventory name, safe as an HAProxy server name and a file name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "", rig_name(rig)) or "rig"


def rig_address(rig: Any, profile: Profile, same_host: bool) -> str | None:
    """Where the gateway reaches the rig's engine; None when it listens on loopback of another host."""
    bound = profile.engine.host
    if same_host:
        return "127.0.0.1" if bound == "0.0.0.0" else bound
    if not listens_beyond_loopback(bound):
        return None
    return str(rig.data.get("gateway_address") or rig.data.get("ssh_hostname") or rig_name(rig))


def inventory_rigs(profile_of: dict[str, Profile]) -> list[tuple[GatewayRig, Any]]:
    """Every serving rig of the inventory as the gateway reaches it, with its pyinfra host (unreachable ones said)."""
    rigs = []
    for rig in inventory:
        name = rig_name(rig)
        profile = profile_of.get(name)
        if profile is None:
            continue
        address = rig_address(rig, profile, same_host=rig.name == host.name)
        if address is None:
            host.log(f"rig {name} left out of the gateway: its engine listens on {profile.engine.host} only "
                     "(engine.host)", logger.warning)
            continue
        keyed = needs_api_key(profile)
        if keyed and not read_local_secret(CONTROLLER_VARIABLE, rig.data.get(HOST_DATA_FILE)):
            # Made on the rig itself (rigforge never carries a key between machines): the gateway cannot have it.
            host.log(f"rig {name} left out of the gateway: its engine asks for its key, given neither as "
                     f"{CONTROLLER_VARIABLE} nor as its host data {HOST_DATA_FILE} on this machine", logger.warning)
            continue
        rigs.append((GatewayRig(server_name(rig), address, profile.engine.port, profile.engine.served_model_name,
                                keyed=keyed), rig))
    return rigs


def say_routes(routes: list[Route], profile: Profile) -> None:
    """Who serves what, the way clients reach it."""
    gateway = profile.gateway
    for route in routes:
        host.log(f"gateway {gateway.listen_host}:{gateway.port}: model {route.model} -> "
                 f"{', '.join(f'{rig.name} ({rig.address}:{rig.port})' for rig in route.rigs)}")


@deploy("Gateway")
def apply_gateway() -> None:
    """Install and configure the fleet's gateway where the profile asks for it; nothing elsewhere."""
    profile = current_profile()
    gateway = profile.gateway
    if not gateway.install:
        host.noop("gateway: not this host (gateway.install)")
        return
    for tradeoff in gateway_beyond_loopback(profile):
        host.log(tradeoff.line())
    members = inventory_rigs(inventory_profiles())
    routes = group_routes([rig for rig, _ in members])
    say_routes(routes, profile)
    package = apt.packages(name=f"Install {gateway.package}", packages=[gateway.package])
    for path, mode in ((GATEWAY_DIR, "755"), (os.path.dirname(STATE_FILE), "755")):
        files.directory(name=f"Create {path}", path=path, mode=mode, user="root", group="root")
    keys = [rig_secret_file(name=f"Gateway key of user {user}", dest=f"{USER_KEY_DIR}/{user}",
                            variable=USER_KEY_VARIABLE.format(user=user.upper().replace("-", "_")),
                            show=f"sudo cat {USER_KEY_DIR}/{user}")
            for user in gateway.users]
    keys += [given_secret_line(name=f"Engine key of {rig.name} for the gateway", dest=rig.key_map,
                               variable=CONTROLLER_VARIABLE, prefix=f"{rig.name} ",
                               local_file=member.data.get(HOST_DATA_FILE))
             for rig, member in members if rig.key_map]
    upload_remote_script(profile, RUNTIME_SCRIPT)
    config = managed_file(name=f"Write {CONFIG_FILE}", dest=CONFIG_FILE, content=render_haproxy_config(profile, routes))
    unit = managed_file(name=f"Write {UNIT_FILE}", dest=UNIT_FILE, content=render(
        "gateway/rigforge-gateway.service.j2", profile, config=CONFIG_FILE,
        runtime_script=f"{REMOTE_LIB_DIR}/{RUNTIME_SCRIPT}", state_file=STATE_FILE))
    follow_up(name="Reload systemd (the gateway's unit changed)", commands=["systemctl daemon-reload"],
              triggers=[unit], what="systemctl daemon-reload")
    follow_up(name=f"Restart {UNIT} (its unit or package changed)", commands=[f"systemctl restart {UNIT}"],
              triggers=[unit, package], what=f"restart {UNIT}")
    follow_up(name=f"Reload {UNIT} (its configuration or a key changed; requests in flight finish)",
              commands=[f"systemctl reload-or-restart {UNIT}"], triggers=[config, *keys],
              what=f"reload {UNIT}")
    systemd.service(name=f"Run {UNIT}", service=UNIT, enabled=True, running=True)

