"""A serving sandbox host moved to another native engine build by deploys/serve.py: measured before and after.

Real: Debian 12 with systemd, llama.cpp's server (xllamacpp from the package index) serving the real Gemma 3 270M,
the venv rebuilt by the engine role, the unit restarted by the service role, every bench, the speed verdict and
the quality pass against the model's reference. Stand-ins, and why: one xllamacpp release is reachable here, so
the "new builds" are the same wheel under another pin (``==2026.10.11549.0`` is the same version by PEP 440's
zero padding): a real reinstall and a real move of the unit, with the engine's code unchanged (an A/A test of the
machinery: no regression may be claimed). The slower build of the regression is that pin again with a TEST-ONLY
hook (tests/e2e/engine_speed.py's way: an ``ExecStartPre`` drop-in) that gives the engine 60 % of one CPU whenever
the venv holds ``SLOW``: what a slower engine build does to the numbers, without its cause.

Slow (``pytest -m slow tests/e2e/test_engine_change_on_hosts.py``): two measured moves of 3 + 3 engine starts each.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rigforge.profile.loader import load_profile
from rigforge.quality.judge import DIFFER, judge_quality
from rigforge.sandbox import SandboxHost, exec_in
from rigforge.sandbox.model import ensure_gemma
from rigforge.serving.engines import LLAMA_VENV, UNIT_NAME
from rigforge.updates.history import load_result
from rigforge.updates.record import ENGINE_UPDATES_DIR
from rigforge.updates.verdict import CANNOT_TELL, WORSE
from tests.e2e.conftest import Sandbox
from tests.e2e.engine_speed import install_start_hook
from tests.e2e.pyinfra_run import REPO_ROOT, PyinfraResult, assert_no_changes, run_pyinfra

pytestmark = pytest.mark.slow

SHIPPED = load_profile("sandbox").engine.native.package  # type: ignore[union-attr]
REBUILT = SHIPPED + ".0"
SLOW = SHIPPED + ".0.0"
DEPLOY = "deploys/serve.py"
# One cell (C=1, the primary metric's) of two 2 s repeats a start, the profile's 3 starts a side, the quality pass on
# at 16 greedy tokens a text (as tests/e2e/test_recipes_on_hosts.py): about 20 s a start on this machine.
BENCH = {"concurrency": [1], "input_tokens": [128], "cell_seconds": 2.0, "repeats": 2, "warmup_requests": 1,
         "verdicts": {"decide_budget_s": 0, "starts": 3}, "quality": {"enabled": True, "max_tokens": 16}}
HOOK_DROPIN = f"/etc/systemd/system/{UNIT_NAME}.d/zz-test-only-slow-build.conf"
HOOK_SCRIPT = "/usr/local/sbin/rigforge-test-only-slow-build"


@dataclass
class Rig:
    sandbox: Sandbox
    host: SandboxHost
    tmp: Path
    model: Path

    @property
    def results(self) -> Path:
        return self.tmp / "results"

    def inventory(self, package: str, quality: bool = True) -> Path:
        overrides = {"model": {"local_path": str(self.model)}, "engine": {"native": {"package": package}},
                     "bench": {**BENCH, "quality": {**BENCH["quality"], "enabled": quality}},
                     "driver_update": {"starts_budget_s": 0}}  # k stays the profile's 3
        return self.sandbox.write_inventory(self.tmp / f"inventory-{package.count('.')}-{quality}.py", [self.host],
                                            "sandbox", overrides)

    def serve(self, package: str, *args: str, check: bool = True, quality: bool = True) -> PyinfraResult:
        return run_pyinfra(self.inventory(package, quality), DEPLOY, *args, check=check,
                           env={"RIGFORGE_RESULTS_DIR": str(self.results)})

    def installed(self) -> str:
        return exec_in(self.host, f"cat {LLAMA_VENV}/.rigforge-package").stdout.strip()

    def records(self) -> list[dict]:
        folder = self.results / self.host.name / ENGINE_UPDATES_DIR
        return [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]


@pytest.fixture(scope="module")
def rig(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    rig = Rig(sandbox, sandbox.fresh_host("engchg"), tmp_path_factory.mktemp("engine-change"),
              ensure_gemma(REPO_ROOT / ".cache" / "models"))
    first = rig.serve(SHIPPED)  # a first install: nothing before it, nothing measured
    assert "engine change: plan" not in first.stdout + first.stderr
    yield rig


def _log(result: PyinfraResult) -> str:
    return result.stdout + result.stderr


def test_a_rebuilt_engine_is_measured_before_and_after_and_a_second_run_changes_nothing(rig: Rig) -> None:
    dry = run_pyinfra(rig.inventory(REBUILT), DEPLOY, dry=True)
    assert f"plan: 3 starts on {SHIPPED} and 3 on {REBUILT} = about " in _log(dry)
    assert "resolution: 3 vs 3 starts at a start-to-start spread of 6.0 %" in _log(dry)
    assert rig.installed() == SHIPPED and not rig.records()

    # At the sandbox's 5 % and its 6 % spread, 3 starts a side cannot say "same" of a build that changed nothing
    # (the plan says so): the owner's switch lets the move stand, the record saying it could not tell.
    moved = rig.serve(REBUILT, "--data", "on_cannot_tell=continue")
    output = _log(moved)
    print("\n".join(line.strip() for line in output.splitlines() if "engine update on" in line or "verdict" in line))
    assert f"Bench start 3 of 3 on {SHIPPED}" in output and f"Bench start 3 of 3 on {REBUILT}" in output
    assert rig.installed() == REBUILT
    [record] = rig.records()
    assert (record["change"], record["driver_before"], record["driver_after"]) == ("engine", SHIPPED, REBUILT)
    assert len(record["baselines"]) == 3 and len(record["afters"]) == 3
    assert record["verdict"] != WORSE, record  # the same engine code: no regression may be claimed
    assert record["went_on"] == (record["verdict"] == CANNOT_TELL) and record["resolution"].startswith("resolution: ")
    assert f"engine update on {rig.host.name}: {SHIPPED} -> {REBUILT}; decode C=1 " in output
    for run in record["afters"]:  # the same answers as the model's reference
        assert judge_quality(load_result(Path(run)).get("quality")).state != DIFFER
    assert load_result(Path(record["baseline"]))["metadata"]["engine_package"] == SHIPPED

    assert_no_changes(rig.inventory(REBUILT), DEPLOY)
    again = rig.serve(REBUILT)
    assert "Bench start" not in _log(again) and len(rig.records()) == 1


def _install_slow_build_hook(host: SandboxHost) -> None:
    """TEST-ONLY: the engine gets 60 % of one CPU at every start while its venv holds ``SLOW``."""
    script = (f"#!/bin/sh\n# TEST-ONLY (tests/e2e/test_engine_change_on_hosts.py): a slower build's stand-in.\n"
              f"if [ \"$(cat {LLAMA_VENV}/.rigforge-package)\" = '{SLOW}' ]; then quota=60%; else quota=; fi\n"
              f"systemctl set-property --runtime {UNIT_NAME} CPUQuota=$quota\n")
    install_start_hook(host, HOOK_DROPIN, HOOK_SCRIPT, script)


def test_a_slower_build_is_a_regression_and_on_regression_rollback_puts_the_old_one_back(rig: Rig) -> None:
    # The speed is judged here (the quality pass is off: the answers are the same build's, and at 60 % of a CPU
    # its pass alone would take minutes a start); the test above judges the answers.
    previous = rig.installed()
    _install_slow_build_hook(rig.host)
    try:
        result = rig.serve(SLOW, "--data", "on_regression=rollback", check=False, quality=False)
    finally:
        exec_in(rig.host, f"rm -f {HOOK_DROPIN} {HOOK_SCRIPT}; systemctl set-property --runtime {UNIT_NAME} "
                          "CPUQuota= ; systemctl daemon-reload")
    output = _log(result)
    print("\n".join(line.strip() for line in output.splitlines() if "engine update on" in line or "rolling" in line))
    assert result.returncode != 0
    record = rig.records()[-1]
    assert (record["driver_before"], record["driver_after"], record["verdict"]) == (previous, SLOW, WORSE), record
    assert f"rolling {rig.host.name} back to engine {previous} (on_regression=rollback)" in output
    assert rig.installed() == previous
    assert exec_in(rig.host, f"systemctl is-active {UNIT_NAME}").stdout.strip() == "active"
