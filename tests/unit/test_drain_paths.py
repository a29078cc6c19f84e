"""Every path that takes a rig out of the fleet gateway's rotation returns it only after what proves its change.

The roles' flows are run with their operations replaced by a recorder: what is checked is the order in which a
flow plans its drain, its restarts, its benches, its comparison and its return (roles/drain.py's operations are
tested against a stand-in gateway in test_drain.py), and that a restart inside a flow that holds the rig out does
not drain it again (a drain inside the restart's operation returned nothing since the return left it).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from rigforge.profile.loader import load_profile
from rigforge.updates.engine_change import EngineBuild, EngineChange
from roles import driver_update, engine_update


class Recorder:
    """Stand-ins for a role's collaborators, each call recorded in order as ``(label, args, kwargs)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def function(self, label: str, answer: Any = None):
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((label, args, kwargs))
            return answer
        return call

    def module(self, name: str, *functions: str) -> SimpleNamespace:
        return SimpleNamespace(**{function: self.function(f"{name}.{function}") for function in functions})

    def labels(self) -> list[str]:
        return [label for label, _, _ in self.calls]

    def index(self, label: str, start: int = 0) -> int:
        return self.labels().index(label, start)


SETTINGS = SimpleNamespace(drain_last=False, on_regression="stay", on_cannot_tell="stop", rollback=False,
                           replace_driver=False, allow_reboot=True, rebuild=False, recipe=None)
DRAIN = ("take_out", "put_back")


def stub_host() -> SimpleNamespace:
    return SimpleNamespace(name="rig-a", log=lambda *args, **kwargs: None, get_fact=lambda *args, **kwargs: None)


def test_a_measured_engine_change_returns_the_rig_only_after_its_comparison(monkeypatch) -> None:
    calls = Recorder()
    for name, functions in {"drain": DRAIN, "bench": ("install_client",), "images": ("apply_images",),
                            "engine": ("apply_engine",), "service": ("apply_service",)}.items():
        monkeypatch.setattr(engine_update, name, calls.module(name, *functions))
    for name in ("measure_side", "judge_change"):
        monkeypatch.setattr(engine_update, name, calls.function(name))
    monkeypatch.setattr(engine_update, "size_starts", lambda profile: SimpleNamespace(starts=3))
    monkeypatch.setattr(engine_update, "engine_plan_line", lambda *args: "3 starts a side")
    monkeypatch.setattr(engine_update, "host", stub_host())
    change = EngineChange(EngineBuild(package="xllamacpp==0.2.1"), EngineBuild(package="xllamacpp==0.2.2"),
                          serving=True)
    engine_update.measured_move(load_profile("sandbox"), change, SETTINGS)
    labels = calls.labels()
    first_bench = calls.index("measure_side")
    assert calls.index("drain.take_out") < first_bench  # out before the baseline's first restart
    move = calls.index("service.apply_service")
    assert calls.calls[move][2]["held_out"]  # the move's restart does not drain it again
    assert first_bench < move < calls.index("measure_side", move) < calls.index("judge_change")
    assert labels[-1] == "drain.put_back"  # after the comparison, which fails the deploy on a regression
    assert labels.count("drain.put_back") == 1


@pytest.mark.parametrize("benched_after", [False, True])
def test_a_restart_that_is_not_measured_returns_after_its_health_wait_or_the_deploys_bench(monkeypatch,
                                                                                          benched_after) -> None:
    calls = Recorder()
    for name, functions in {"drain": DRAIN, "images": ("apply_images",), "engine": ("apply_engine",),
                            "service": ("apply_service",)}.items():
        monkeypatch.setattr(engine_update, name, calls.module(name, *functions))
    monkeypatch.setattr(engine_update, "current_profile", lambda: load_profile("sandbox"))
    monkeypatch.setattr(engine_update, "plan_engine_change", lambda profile, settings: None)
    engine_update.apply_engine_change(SETTINGS, move_unit=True, benched_after=benched_after)
    restart = calls.index("service.apply_service")
    assert not calls.calls[restart][2].get("held_out")  # a restart of a serving rig drains it first
    if benched_after:  # deploys/full.py returns it after its bench
        assert calls.calls[restart][2]["until"] == "its bench passes"
        assert "drain.put_back" not in calls.labels()
    else:  # deploys/serve.py runs no bench: the health wait (inside the restart's operation) proves it
        assert calls.calls[restart][2]["until"] == "its health wait passes"
        assert calls.labels()[restart + 1:] == ["drain.put_back"]


def test_the_full_deploy_returns_a_rig_only_after_its_bench() -> None:
    from pathlib import Path

    text = Path(__file__).resolve().parents[2].joinpath("deploys", "full.py").read_text()
    change = text.index("apply_engine_change(settings, move_unit=True, benched_after=settings.bench)")
    assert change < text.index("bench.apply_bench()") < text.index('drain.put_back(current_profile(), "its bench')


def test_a_driver_update_returns_the_rig_only_after_its_comparison(monkeypatch) -> None:
    calls = Recorder()
    modules = {"drain": DRAIN, "bench": ("install_client",), "images": ("apply_images",),
               "service": ("apply_service",), "cuda": ("apply_cuda",), "server": ("shell",),
               "systemd": ("service",)}
    for name, functions in modules.items():
        monkeypatch.setattr(driver_update, name, calls.module(name, *functions))
    changes = SimpleNamespace(boot_triggers=[], refreshed_by=[])
    monkeypatch.setattr(driver_update, "driver", SimpleNamespace(apply_driver=calls.function("driver", changes)))
    for name in ("refuse_untrusted_driver", "refuse_foreign_driver", "measure_side", "managed_file",
                 "remember_reboot_triggers", "module_built_for_kernel", "reboot_if_needed", "verify_driver",
                 "judge_change"):
        monkeypatch.setattr(driver_update, name, calls.function(name))
    monkeypatch.setattr(driver_update, "size_starts", lambda profile: SimpleNamespace(starts=3))
    monkeypatch.setattr(driver_update, "plan_line", lambda *args: "3 starts a side")
    monkeypatch.setattr(driver_update, "recent_baselines", lambda *args: None)
    monkeypatch.setattr(driver_update, "host", stub_host())
    plan = driver_update.UpdatePlan("590.48.01", "590.48.01", "595.45.04", rollback=False)
    driver_update.update_flow(load_profile("2x-pix"), plan, SETTINGS)
    labels = calls.labels()
    assert calls.index("drain.take_out") < calls.index("measure_side") < calls.index("systemd.service")
    service = calls.index("service.apply_service")
    assert calls.calls[service][2]["held_out"]  # out since the drain: the engine's start is not a drain of its own
    assert service < calls.index("measure_side", service) < calls.index("judge_change")
    assert labels[-1] == "drain.put_back" and labels.count("drain.put_back") == 1


def test_a_tournament_and_its_final_recipe_hold_the_rig_out_until_the_tournament_ends(monkeypatch) -> None:
    from roles import recipes

    calls = Recorder()
    for name, functions in {"base": ("record_profile",), "weights": ("apply_weights",),
                            "images": ("apply_images",), "engine": ("apply_engine",),
                            "service": ("apply_service",)}.items():
        monkeypatch.setattr(recipes, name, calls.module(name, *functions))
    recipes.settle(load_profile("sandbox"), "default", "default", "20261202T070000Z")
    restart = calls.index("service.apply_service")
    assert calls.calls[restart][2] == {"settled": True, "held_out": True}


def engine_restart_commands(planning, running: bool) -> list[Any]:
    """The commands of the engine service's operation for a rig whose engine inputs changed."""
    import hashlib

    from pyinfra.api import FunctionCommand
    from pyinfra.facts.files import File, Sha256File

    from rigforge.facts.service import EngineAnswersHealthy, EngineService, ServiceState
    from rigforge.operations.service import engine_service, inputs_digest

    _, _, facts = planning
    digest = inputs_digest({"unit": "new"})
    facts.update({Sha256File: hashlib.sha256(digest.encode()).hexdigest(), File: {"size": 1},
                  EngineAnswersHealthy: True,
                  EngineService: ServiceState("loaded", "active" if running else "inactive", "running", True, False,
                                              5 if running else 0, "id", 1, "old" if running else None)})
    drain = FunctionCommand(lambda state, host: True, (), {})
    commands = list(engine_service._inner(unit="rigforge-engine.service", dropin="/d/inputs.conf",
                                          render_dropin=lambda d: d, inputs={"unit": "new"}, watched_files=[],
                                          image=None, health_url="http://127.0.0.1:8080/health",
                                          health_timeout_s=60, wait_script="/w", drain_first=drain))
    return [command if command is drain else str(command) for command in commands]


def test_a_serving_engines_restart_drains_it_first_and_leaves_its_return_to_the_caller(planning) -> None:
    commands = engine_restart_commands(planning, running=True)
    assert not isinstance(commands[0], str)  # the drain, before the restart
    assert commands[1:] == ["systemctl restart rigforge-engine.service",
                            "sh /w rigforge-engine.service http://127.0.0.1:8080/health 60"]  # nothing after it


def test_a_stopped_engines_start_drains_nothing(planning) -> None:
    assert all(isinstance(command, str) for command in engine_restart_commands(planning, running=False))
