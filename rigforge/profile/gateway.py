"""The profile's ``gateway`` section: one endpoint for the rigs of an inventory (deploys/gateway.py, docs/fleet.md).

The host whose profile sets ``gateway.install`` (per-host overrides in the inventory) runs HAProxy from its
distribution, routing each model to every rig of the inventory whose ``engine.served_model_name`` names it.
Clients call it with a key of their own (one per user in ``users``); the rigs' engine keys stay on that host.
Bad combinations (a health check that could never mark a hung engine down before a request's retry) fail at load.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints, model_validator

from rigforge.profile.monitoring import ListenHost
from rigforge.profile.types import FieldError, Port, SafeText, StrictModel

Seconds = Annotated[int, Field(ge=1, le=86400)]
#: A user name of the gateway: its key's file name and the ``user`` of its log lines.
UserName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,31}$")]


class GatewayHealth(StrictModel):
    # Seconds between two health checks of one rig (GET /health).
    interval_s: Seconds
    # Seconds a health check may wait for its answer: past it the check failed (a hung engine answers nothing).
    timeout_s: Seconds
    # Failed checks in a row that take a rig out of rotation, and passed ones that put it back.
    fall: Annotated[int, Field(ge=1, le=100)]
    rise: Annotated[int, Field(ge=1, le=100)]


class GatewayAlerts(StrictModel):
    # Seconds a rig may stay out of rotation (down or drained) before its alert fires.
    out_of_rotation_for_s: Annotated[int, Field(ge=0, le=604800)]


class Gateway(StrictModel):
    install: bool
    # The distribution's package, pinned: the version the measurements and tests ran (apt's name=version).
    package: Annotated[str, StringConstraints(pattern=r"^haproxy=[0-9][A-Za-z0-9.+~:-]*$")]
    listen_host: ListenHost
    port: Port
    # Where the gateway's Prometheus exporter listens (HAProxy's built-in one), scraped by the monitoring.
    metrics_listen_host: ListenHost
    metrics_port: Port
    # One key each: a user's key is made on the gateway host once and rotated with --data rotate_key=USER.
    users: Annotated[list[UserName], Field(min_length=1)]
    health: GatewayHealth
    # Seconds a request may wait for the rig's first byte of answer before it is retried on another rig.
    response_timeout_s: Seconds
    # Further rigs a request is tried on when its rig refused it, failed before answering or timed out.
    retries: Annotated[int, Field(ge=0, le=10)]
    # Seconds a drain waits for the requests in flight on the rig before it goes on without them.
    drain_timeout_s: Seconds
    alerts: GatewayAlerts
    description: SafeText | None = None

    @model_validator(mode="after")
    def _hung_rig_noticed(self) -> Gateway:
        if self.health.timeout_s > self.health.interval_s:
            raise FieldError("must be at most gateway.health.interval_s: a check that waits longer than the next "
                             "one is due overlaps it", ("gateway", "health", "timeout_s"))
        if len(set(self.users)) != len(self.users):
            raise FieldError("names each user once (one key per user)", ("gateway", "users"))
        return self

    @property
    def out_of_rotation_after_s(self) -> int:
        """Seconds from a rig that stops answering to its leaving the rotation (the health checks' worst case)."""
        return self.health.fall * self.health.interval_s + self.health.timeout_s
