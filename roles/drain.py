"""Drain and return: a rig taken out of the fleet gateway's rotation before a change, put back once it passed.

Where the run's inventory has a gateway (the host whose profile sets ``gateway.install``), ``take_out`` drains the
rig at the gateway (no new request goes to it; those in flight finish, waited for up to ``gateway.drain_timeout_s``)
and sets it out of rotation; ``put_back`` returns it (the gateway's health checks then let it in once they pass).
An engine restart of a serving rig drains it inside the restart's own operation (``drain_before_restart``), so a
run that restarts nothing drains nothing. Every path returns the rig in a later operation of its own, placed after
what proves the change: the health wait, and the bench or the measured comparison where the path runs one. That
operation returns only a rig this run took out (one drained by hand, or left out by an earlier failed run, stays
as it is), and a run that fails before it leaves the rig out of rotation, as each drain says.
Both run on the controller while the rig's operations execute, through the gateway host's own connection and the
runtime API there (``/opt/rigforge/lib/gateway_runtime.py``). The last rig in rotation for its model is never
drained unless the run says ``--data drain_last=true`` (the operation fails instead, before anything changed).
Each step prints who serves what. Without a gateway in the inventory both are no-ops.

Example (a change that restarts the engine)::

    drain.take_out(profile, "driver update", "the starts after the update are benched and compared")
    ...  # the change, the engine healthy again, its bench passed
    drain.put_back(profile, "the starts after the update passed their comparison")
"""

from __future__ import annotations

import json
import time

from pyinfra import host, inventory, logger, state
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.host import Host
from pyinfra.api.state import State

from rigforge.fleet.rotation import BACKEND_PREFIX, RigState, drain_refusal, rig_states, serving_table
from rigforge.gateway.haproxy import Route
from rigforge.profile import Profile
from rigforge.serving.engines import REMOTE_LIB_DIR
from roles.gateway import server_name

RUNTIME = f"{REMOTE_LIB_DIR}/gateway_runtime.py"
#: Seconds between two looks at the rig's requests in flight while it drains.
POLL_S = 1.0
#: (gateway, backend, rig) of every rig this run took out and has not returned yet: a return is for those alone.
TAKEN_OUT: set[tuple[str, str, str]] = set()


def fleet_gateway() -> tuple[Host, Profile] | None:
    """The inventory's gateway host and its profile, or None when the fleet has none."""
    for candidate in inventory:
        data = candidate.data.get("rigforge_profile")
        if data and data.get("gateway", {}).get("install"):
            return candidate, Profile.model_validate(data)
    return None


def gateway_states(gateway: Host) -> list[RigState]:
    """Who serves what at the gateway now (its runtime API's ``show``)."""
    if not gateway.connected:  # outside this run's --limit: reached for the drain alone
        gateway.connect(reason="the fleet's gateway")
    ok, output = (gateway.run_shell_command(StringCommand("python3", RUNTIME, "show")) if gateway.connected
                  else (False, None))
    if not ok or output is None:
        raise RuntimeError(f"the gateway on {gateway.name} did not answer its runtime API ({RUNTIME} show)")
    return rig_states(json.loads(output.stdout))


def set_state(gateway: Host, backend: str, rig: str, wanted: str) -> None:
    ok, output = gateway.run_shell_command(StringCommand("python3", RUNTIME, "set", backend, rig, wanted))
    if not ok:
        said = getattr(output, "stderr", "") if output is not None else ""
        raise RuntimeError(f"the gateway on {gateway.name} refused to set {rig} {wanted}: {said}")


def _backend(profile: Profile) -> str:
    return BACKEND_PREFIX + Route(profile.engine.served_model_name, ()).slug


def _drain(state: State, host: Host, gateway: Host, backend: str, timeout_s: int, allow_last: bool,
           until: str = "its change is proven") -> bool:
    # pyinfra hands ``state`` and ``host`` (the rig) to a FunctionCommand whose parameters bear those names.
    name = server_name(host)
    try:
        table = gateway_states(gateway)
    except (RuntimeError, ValueError) as error:  # not deployed yet, or down: it routes nothing to drain from
        host.log(f"gateway: {error}: going on without a drain (deploys/gateway.py installs it)", logger.warning)
        return True
    host.log(f"gateway: who serves what before {name} is drained: {serving_table(table)}")
    refusal = drain_refusal(table, name, allow_last)
    if refusal:
        host.log(f"gateway: {refusal}", logger.error)
        return False
    key = (gateway.name, backend, name)
    # Set out of rotation before this run (by hand, or left out by a run that failed): this run does not return it.
    out_before = key not in TAKEN_OUT and any(row.rig == name and row.backend == backend and row.held_out
                                              for row in table)
    set_state(gateway, backend, name, "drain")
    deadline = time.monotonic() + timeout_s
    while True:
        in_flight = sum(s.in_flight for s in gateway_states(gateway) if s.rig == name and s.backend == backend)
        if in_flight == 0 or time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    if in_flight:
        host.log(f"gateway: {in_flight} requests still on {name} after {timeout_s} s (gateway.drain_timeout_s): "
                "going on without them", logger.warning)
    set_state(gateway, backend, name, "maint")
    host.log(f"gateway: {name} out of rotation; who serves what: {serving_table(gateway_states(gateway))}")
    ready = f"on {gateway.name}: python3 {RUNTIME} set {backend} {name} ready"
    if out_before:
        host.log(f"gateway: {name} was out of rotation before this run (by hand, or left out by a run that failed): "
                 f"this run leaves it out; once it should serve, {ready}", logger.warning)
        return True
    TAKEN_OUT.add(key)
    host.log(f"gateway: {name} stays out until {until}; a run that fails before leaves it out of rotation (once "
             f"fixed, {ready})")
    return True


def _return(state: State, host: Host, gateway: Host, backend: str, after: str) -> bool:
    name = server_name(host)
    if (gateway.name, backend, name) not in TAKEN_OUT:  # nothing restarted, or drained by hand: not this run's
        host.log(f"gateway: {name} was not taken out by this run: its state at the gateway stays as it is")
        return True
    try:
        set_state(gateway, backend, name, "ready")
    except RuntimeError as error:
        host.log(f"gateway: {error}: nothing to return to", logger.warning)
        return True
    TAKEN_OUT.discard((gateway.name, backend, name))
    host.log(f"gateway: {name} back once {after} (in rotation once its health checks pass); who serves what: "
             f"{serving_table(gateway_states(gateway))}")
    return True


@operation(is_idempotent=False)
def take_out_of_rotation(profile: Profile, reason: str, until: str, allow_last: bool = False):
    """
    Drain this rig at the fleet's gateway and set it out of rotation (nothing without a gateway).

    + profile: the rig's profile (its served model names its route)
    + reason: what the rig leaves for, for the plan's line
    + until: what must pass before the rig returns (the drain says it)
    + allow_last: drain it even when it is the last rig in rotation for its model
    """
    found = fleet_gateway()
    if found is None:
        host.noop("no gateway in this inventory: nothing to drain")
        return
    gateway, gateway_profile = found
    host.log(f"gateway: {server_name(host)} leaves the rotation of {gateway.name} for the {reason}")
    yield FunctionCommand(_drain, (gateway, _backend(profile), gateway_profile.gateway.drain_timeout_s, allow_last,
                                   until), {})


@operation(is_idempotent=False)
def return_to_rotation(profile: Profile, after: str):
    """
    Put this rig back in the fleet gateway's rotation if this run took it out (nothing without a gateway).

    + profile: the rig's profile (its served model names its route)
    + after: what passed before this operation (the return says it)
    """
    found = fleet_gateway()
    if found is None:
        host.noop("no gateway in this inventory: nothing to return")
        return
    if not state.is_executing:  # whether this run takes the rig out is known once its operations execute
        host.noop(f"returned once {after}, if this run takes it out of rotation")
        return
    yield FunctionCommand(_return, (found[0], _backend(profile), after), {})


def drain_before_restart(profile: Profile, allow_last: bool, until: str) -> FunctionCommand | None:
    """The drain before an engine restart of a serving rig (roles/service.py), run inside the restart's own
    operation so that a run that restarts nothing drains nothing; None without a gateway. The return is the
    caller's ``put_back``, after what proves the restart.

    + profile: the rig's profile (its served model names its route)
    + allow_last: drain it even when it is the last rig in rotation for its model
    + until: what must pass before the rig returns (the drain says it)
    """
    found = fleet_gateway()
    if found is None:
        return None
    gateway, gateway_profile = found
    return FunctionCommand(_drain, (gateway, _backend(profile), gateway_profile.gateway.drain_timeout_s, allow_last,
                                    until), {})


def take_out(profile: Profile, reason: str, until: str, allow_last: bool = False) -> None:
    """The drain as one operation of the rig's deploy (see the module docstring).

    + profile: the rig's profile
    + reason: what the rig leaves for
    + until: what must pass before the rig returns
    + allow_last: drain it even when it is the last rig in rotation for its model
    """
    take_out_of_rotation(name=f"Take {server_name(host)} out of the gateway's rotation ({reason})", profile=profile,
                         reason=reason, until=until, allow_last=allow_last)


def put_back(profile: Profile, after: str) -> None:
    """The return as one operation of the rig's deploy, placed after what proves the change.

    + profile: the rig's profile
    + after: what passed before it (its health wait, its bench, its comparison)
    """
    return_to_rotation(name=f"Put {server_name(host)} back in the gateway's rotation ({after})", profile=profile,
                       after=after)
