"""Who serves what behind the fleet's gateway, and whether a rig may leave the rotation.

The gateway's runtime API (``rigforge/remote/gateway_runtime.py show`` on the gateway host) answers one row per rig
of every model's backend; this module reads those rows, refuses to drain the last rig in rotation for a model
(unless the run's switch says so, as Kubernetes' PodDisruptionBudget refuses an eviction) and says the table in
one line, printed at each step of a drain and a return.

Example::

    table = rig_states(json.loads(answer))
    refusal = drain_refusal(table, "rig-a", allow_last=False)
"""

from __future__ import annotations

from dataclasses import dataclass

#: HAProxy's status words and what they mean to an owner.
STATUS_WORDS = {"UP": "in rotation", "DRAIN": "drained", "MAINT": "out of rotation", "DOWN": "down",
                "NOLB": "drained"}
BACKEND_PREFIX = "model-"


@dataclass(frozen=True)
class RigState:
    """One rig of one model's backend, as the gateway sees it now."""

    backend: str
    rig: str
    status: str  # HAProxy's: UP, DOWN, DRAIN, MAINT, "UP 1/2" while a check rises...
    in_flight: int

    @property
    def model(self) -> str:
        return self.backend.removeprefix(BACKEND_PREFIX)

    @property
    def in_rotation(self) -> bool:
        return self.status.split()[0] == "UP"

    @property
    def held_out(self) -> bool:
        """Set out of rotation at the gateway (drained or in maintenance), not merely failing its health checks."""
        return self.status.split()[0] in ("DRAIN", "MAINT", "NOLB")


def rig_states(rows: list[dict[str, object]]) -> list[RigState]:
    """The runtime API's ``show`` rows as ``RigState``."""
    return [RigState(str(row["backend"]), str(row["rig"]), str(row["status"]), int(str(row["in_flight"])))
            for row in rows]


def drain_refusal(table: list[RigState], rig: str, allow_last: bool) -> str | None:
    """Why ``rig`` must not leave the rotation now (the last one in rotation for a model), or None.

    + table: the gateway's rigs now
    + rig: the rig to drain
    + allow_last: the run's switch (``--data drain_last=true``): the owner accepts that model going dark
    """
    for state in table:
        if state.rig != rig or not state.in_rotation or allow_last:
            continue
        others = [other for other in table if other.backend == state.backend and other.rig != rig
                  and other.in_rotation]
        if not others:
            return (f"{rig} is the last rig in rotation for {state.model}: draining it leaves that model without a "
                    "rig (--data drain_last=true to drain it all the same)")
    return None


def serving_table(table: list[RigState]) -> str:
    """Who serves what, one line: each model with its rigs and their state."""
    parts = []
    for backend in dict.fromkeys(state.backend for state in table):
        members = [state for state in table if state.backend == backend]
        model = members[0].model
        if not any(state.in_rotation for state in members):
            out = ", ".join(f"{state.rig} {STATUS_WORDS.get(state.status.split()[0], state.status)}"
                            for state in members)
            parts.append(f"{model}: no rig in rotation ({out})")
            continue
        parts.append(f"{model}: " + ", ".join(_rig_words(state) for state in members))
    return "; ".join(parts)


def _rig_words(state: RigState) -> str:
    words = STATUS_WORDS.get(state.status.split()[0], state.status)
    return f"{state.rig} ({words}, {state.in_flight} in flight)" if state.in_rotation else f"{state.rig} ({words})"
