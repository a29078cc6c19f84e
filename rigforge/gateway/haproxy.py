"""HAProxy's configuration for the fleet's gateway: one route per served model, every rig serving it behind it.

The rigs come in as ``GatewayRig`` (name, address the gateway reaches it at, port, whether its engine asks for a
key); ``routes`` groups them by ``engine.served_model_name`` in the inventory's order, and ``render_haproxy_config``
writes ``templates/gateway/haproxy.cfg.j2``. No secret is rendered: files hold the keys, the config names them.

Example::

    routes = group_routes([GatewayRig("rig1", "10.0.0.2", 8080, "gemma-3-270m", keyed=True)])
    text = render_haproxy_config(profile, routes)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from rigforge.profile import Profile
from rigforge.render import render

GATEWAY_DIR = "/etc/rigforge/gateway"
CONFIG_FILE = f"{GATEWAY_DIR}/haproxy.cfg"
SECRETS_DIR = "/etc/rigforge/secrets/gateway"
USER_KEY_DIR = f"{SECRETS_DIR}/users"
RIG_KEY_DIR = f"{SECRETS_DIR}/rigs"
RUN_DIR = "/run/rigforge-gateway"
ADMIN_SOCKET = f"{RUN_DIR}/admin.sock"
STATE_FILE = "/var/lib/rigforge/gateway/server-state"
UNIT = "rigforge-gateway.service"
#: Seconds a client may stay silent (its request's body, or between two requests on one connection).
CLIENT_TIMEOUT_S = 60


@dataclass(frozen=True)
class GatewayRig:
    """One rig as the gateway reaches it."""

    name: str
    address: str
    port: int
    model: str
    keyed: bool  # its engine asks for its API key
    run_dir: str = RUN_DIR  # where its hop's socket lives (a measurement run elsewhere passes its own)

    @property
    def hop_socket(self) -> str:
        return f"{self.run_dir}/hop-{self.name}.sock"

    @property
    def key_map(self) -> str | None:
        """The root-only map file holding the rig's engine key (``NAME KEY``), when it asks for one."""
        return f"{RIG_KEY_DIR}/{self.name}.map" if self.keyed else None


@dataclass(frozen=True)
class Route:
    """A model and the rigs that serve it, in the inventory's order."""

    model: str
    rigs: tuple[GatewayRig, ...]

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]", "_", self.model)


def group_routes(rigs: list[GatewayRig]) -> list[Route]:
    """One route per model, each with every rig that serves it (models in the order first seen).

    + rigs: the inventory's rigs as the gateway reaches them
    """
    by_model: dict[str, list[GatewayRig]] = {}
    for rig in rigs:
        by_model.setdefault(rig.model, []).append(rig)
    return [Route(model, tuple(members)) for model, members in by_model.items()]


def models_json(routes: list[Route]) -> str:
    """``GET /v1/models`` as the gateway answers it: every routed model (OpenAI's list shape)."""
    body = {"object": "list", "data": [{"id": route.model, "object": "model", "owned_by": "rigforge"}
                                       for route in routes]}
    return json.dumps(body, separators=(",", ":"))


def render_haproxy_config(profile: Profile, routes: list[Route], admin_socket: str = ADMIN_SOCKET,
                          state_file: str = STATE_FILE, user_key_dir: str = USER_KEY_DIR) -> str:
    """The gateway's haproxy.cfg for ``routes`` with the profile's ``gateway`` settings.

    + routes: from ``group_routes``
    + admin_socket, state_file, user_key_dir: where the runtime API, the saved drain states and the users' keys
      live (the defaults on a gateway host; a measurement run elsewhere passes its own)
    """
    return render("gateway/haproxy.cfg.j2", profile, gateway=profile.gateway, routes=routes,
                  models_json=models_json(routes), admin_socket=admin_socket, state_file=state_file,
                  user_key_dir=user_key_dir, client_timeout_s=CLIENT_TIMEOUT_S)


def rig_key_map_line(rig: GatewayRig, key: str) -> str:
    """The content of a rig's key map: its name and its key, one line (HAProxy's map format)."""
    return f"{rig.name} {key}\n"
