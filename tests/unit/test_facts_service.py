"""The engine service fact's parser, on real ``systemctl show`` output captured on a sandbox host."""

from __future__ import annotations

from pathlib import Path

from rigforge.facts.service import NO_SERVICE, EngineService, parse_service_state
from rigforge.operations.service import inputs_digest, restart_reason

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "serving"


def capture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_running_service_carries_the_inputs_it_started_with() -> None:
    state = parse_service_state(capture("service-running.txt"))
    assert state.running and state.enabled and state.load_state == "loaded"
    assert state.main_pid == 2107
    assert state.running_inputs == "bb07800faeb479b7059e"
    assert not state.needs_daemon_reload
    assert restart_reason(state, "bb07800faeb479b7059e") is None
    assert "inputs changed" in (restart_reason(state, "another") or "")


def test_unknown_unit_is_not_running_and_needs_a_start() -> None:
    state = parse_service_state(capture("service-not-found.txt"))
    assert state.load_state == "not-found" and not state.running and not state.enabled
    assert state.running_inputs is None
    assert "inactive" in (restart_reason(state, "x") or "")


def test_crash_loop_between_restarts_is_not_running() -> None:
    state = parse_service_state(capture("service-crash-loop.txt"))
    assert state.active_state == "activating" and state.sub_state == "auto-restart"
    assert not state.running
    assert "auto-restart" in (restart_reason(state, "x") or "")


def test_empty_output_is_no_service() -> None:
    assert parse_service_state("") == NO_SERVICE


def test_digest_is_stable_and_changes_with_any_input() -> None:
    base = {"unit": "a", "/etc/rigforge/engine.env": "absent", "manifest": "m"}
    assert inputs_digest(base) == inputs_digest(dict(reversed(list(base.items()))))
    for key in base:
        assert inputs_digest({**base, key: "changed"}) != inputs_digest(base)


def test_command_reads_the_main_process_environment() -> None:
    command = EngineService().command("rigforge-engine.service")
    assert "/proc/$pid/environ" in command and "RIGFORGE_INPUTS" in command


def test_health_answer_reads_the_commands_own_verdict() -> None:
    from rigforge.facts.service import parse_health_answer

    assert parse_health_answer(["healthy"]) is True
    assert parse_health_answer(["not-healthy"]) is False
    assert parse_health_answer([]) is False
