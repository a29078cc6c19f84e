"""A drain and a return spoken to the gateway's runtime API (roles/drain.py), against a stand-in gateway host.

The stand-in answers ``gateway_runtime.py show`` with the rows a real HAProxy gives (its requests in flight fall as
they finish) and records every ``set``: the order of a drain is checked, not its timing.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from roles import drain


class StandInGateway:
    """Answers the runtime API like a gateway with two rigs of one model."""

    name = "gw"
    connected = True

    def __init__(self, other_status: str = "UP", in_flight: list[int] | None = None) -> None:
        self.status = {"rig-a": "UP", "rig-b": other_status}
        self.in_flight = in_flight or [2, 1, 0]
        self.sets: list[tuple[str, str]] = []

    def run_shell_command(self, command):
        words = str(command).split()
        if words[-1] == "show":
            flight = self.in_flight.pop(0) if len(self.in_flight) > 1 else self.in_flight[0]
            rows = [{"backend": "model-qwen", "rig": rig, "status": status, "in_flight": flight if rig == "rig-a"
                     else 0} for rig, status in self.status.items()]
            return True, SimpleNamespace(stdout=json.dumps(rows), stderr="")
        backend, rig, wanted = words[-3:]
        self.sets.append((rig, wanted))
        self.status[rig] = {"drain": "DRAIN", "maint": "MAINT", "ready": "UP"}[wanted]
        return True, SimpleNamespace(stdout="", stderr="")


class Rig:
    name = "@rigforge/rig-a"

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, message: str, *args) -> None:
        self.lines.append(message)


def test_a_drain_waits_for_the_requests_in_flight_then_sets_the_rig_out(monkeypatch) -> None:
    monkeypatch.setattr(drain, "POLL_S", 0)
    gateway, rig = StandInGateway(), Rig()
    assert drain._drain(None, rig, gateway, "model-qwen", timeout_s=30, allow_last=False)
    assert gateway.sets == [("rig-a", "drain"), ("rig-a", "maint")]
    assert gateway.in_flight == [0]  # it looked until none was left
    assert rig.lines[0].startswith("gateway: who serves what before rig-a is drained: qwen: rig-a (in rotation")
    assert rig.lines[-2].endswith("qwen: rig-a (out of rotation), rig-b (in rotation, 0 in flight)")
    assert rig.lines[-1].startswith("gateway: rig-a stays out until its change is proven; a run that fails before "
                                    "leaves it out of rotation")
    assert drain._return(None, rig, gateway, "model-qwen", "its bench passed")
    assert gateway.sets[-1] == ("rig-a", "ready")
    assert rig.lines[-1].startswith("gateway: rig-a back once its bench passed")


def test_a_return_leaves_alone_a_rig_this_run_did_not_take_out(monkeypatch) -> None:
    monkeypatch.setattr(drain, "TAKEN_OUT", set())
    gateway, rig = StandInGateway(), Rig()
    gateway.status["rig-a"] = "MAINT"  # drained by hand, or left out by an earlier run whose bench failed
    assert drain._return(None, rig, gateway, "model-qwen", "its bench passed")
    assert gateway.sets == [] and gateway.status["rig-a"] == "MAINT"
    assert "was not taken out by this run" in rig.lines[-1]


def test_a_rig_taken_out_twice_in_one_run_is_returned_once(monkeypatch) -> None:
    monkeypatch.setattr(drain, "POLL_S", 0)
    monkeypatch.setattr(drain, "TAKEN_OUT", set())
    gateway, rig = StandInGateway(in_flight=[0]), Rig()
    for _ in range(2):  # a driver update's rollback drains the rig its update took out
        assert drain._drain(None, rig, gateway, "model-qwen", timeout_s=30, allow_last=False)
    assert drain._return(None, rig, gateway, "model-qwen", "its comparison passed")
    assert drain._return(None, rig, gateway, "model-qwen", "its bench passed")
    assert [wanted for _, wanted in gateway.sets].count("ready") == 1


def test_the_last_rig_in_rotation_is_not_drained_unless_the_switch_says_so(monkeypatch) -> None:
    monkeypatch.setattr(drain, "POLL_S", 0)
    gateway, rig = StandInGateway(other_status="DOWN"), Rig()
    assert not drain._drain(None, rig, gateway, "model-qwen", timeout_s=30, allow_last=False)
    assert gateway.sets == []  # nothing changed
    assert "last rig in rotation for qwen" in rig.lines[-1]
    assert drain._drain(None, rig, gateway, "model-qwen", timeout_s=30, allow_last=True)
    assert gateway.sets[-1] == ("rig-a", "maint")


def test_a_drain_goes_on_after_its_timeout_and_says_so(monkeypatch) -> None:
    monkeypatch.setattr(drain, "POLL_S", 0)
    gateway, rig = StandInGateway(in_flight=[3]), Rig()
    assert drain._drain(None, rig, gateway, "model-qwen", timeout_s=0, allow_last=False)
    assert any("3 requests still on rig-a after 0 s" in line for line in rig.lines)
    assert gateway.sets == [("rig-a", "drain"), ("rig-a", "maint")]


def test_a_gateway_not_deployed_yet_lets_the_change_go_on_without_a_drain() -> None:
    class NotThere(StandInGateway):
        def run_shell_command(self, command):
            return False, SimpleNamespace(stdout="", stderr="No such file or directory")

    rig = Rig()
    assert drain._drain(None, rig, NotThere(), "model-qwen", timeout_s=30, allow_last=False)
    assert "going on without a drain" in rig.lines[-1]


def test_a_gateway_outside_the_runs_limit_is_connected_for_the_drain(monkeypatch) -> None:
    monkeypatch.setattr(drain, "POLL_S", 0)

    class Unconnected(StandInGateway):
        connected = False

        def connect(self, reason=None) -> None:
            self.connected = True

    gateway, rig = Unconnected(), Rig()
    assert drain._drain(None, rig, gateway, "model-qwen", timeout_s=30, allow_last=False)
    assert gateway.connected and gateway.sets[-1] == ("rig-a", "maint")


def test_pyinfra_hands_the_drain_its_state_and_rig() -> None:
    import inspect

    # pyinfra's FunctionCommand passes state and host only to a function whose parameters bear those names.
    for function in (drain._drain, drain._return):
        assert list(inspect.signature(function).parameters)[:2] == ["state", "host"]


def test_a_rig_out_of_rotation_before_the_run_is_drained_but_not_returned(monkeypatch) -> None:
    monkeypatch.setattr(drain, "POLL_S", 0)
    monkeypatch.setattr(drain, "TAKEN_OUT", set())
    gateway, rig = StandInGateway(in_flight=[0]), Rig()
    gateway.status["rig-a"] = "MAINT"  # drained by hand, or left out by an update whose bench failed
    assert drain._drain(None, rig, gateway, "model-qwen", timeout_s=30, allow_last=False)
    assert "was out of rotation before this run" in rig.lines[-1] and "set model-qwen rig-a ready" in rig.lines[-1]
    assert drain._return(None, rig, gateway, "model-qwen", "its bench passed")
    assert gateway.status["rig-a"] == "MAINT"  # still out: the owner puts it back


def test_a_rig_that_was_only_down_is_returned_once_its_change_is_proven(monkeypatch) -> None:
    monkeypatch.setattr(drain, "POLL_S", 0)
    monkeypatch.setattr(drain, "TAKEN_OUT", set())
    gateway, rig = StandInGateway(in_flight=[0]), Rig()
    gateway.status["rig-a"] = "DOWN"  # its health checks fail (the engine died): the restart is the fix
    assert drain._drain(None, rig, gateway, "model-qwen", timeout_s=30, allow_last=False)
    assert drain._return(None, rig, gateway, "model-qwen", "its health wait passed")
    assert gateway.status["rig-a"] == "UP"
