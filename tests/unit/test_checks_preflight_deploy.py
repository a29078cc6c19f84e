"""The preflight role in real pyinfra runs: a blocking failure stops only its host, before any change.

Two kinds of runs, both through pyinfra itself:
- in-process with pyinfra's @fake connector, which answers each fact command with a real capture
  from the lent H200 machine (tests/fixtures/device-run/facts): a stand-in for an SSH host, since
  no GPU host can exist here; the commands, parsers, checks and the stop are rigforge's own;
- the pyinfra CLI against this machine through @local (no NVIDIA GPU here), for exit codes.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyinfra.api import Config, Inventory, State, deploy
from pyinfra.api.connect import connect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.operations import run_ops
from pyinfra.api.state import StateStage
from pyinfra.operations import server

from rigforge.checks import FACT_SOURCES, NO_GPU
from rigforge.profile.loader import load_profile
from roles import preflight
from tests.support_checks import DEVICE_RUN

REPO = Path(__file__).resolve().parents[2]
LATER_CHANGE = "echo a-later-change"


@pytest.fixture(autouse=True)
def _pyinfra_info_logs(caplog: pytest.LogCaptureFixture) -> None:
    """The table and probe lines are logged at INFO, as the CLI shows them."""
    caplog.set_level(logging.INFO, logger="pyinfra")


def _replayed_facts(folder: Path | None) -> dict[str, str]:
    """fact command -> captured output; longest first, since the fake connector matches substrings."""
    responses = {}
    for fact in FACT_SOURCES.values():
        path = None if folder is None else folder / f"fact-{fact.__name__}.txt"
        responses[fact().command()] = path.read_text() if path and path.exists() else ""
    return dict(sorted(responses.items(), key=lambda item: -len(item[0])))


def _fake_host(name: str, profile: str, facts: Path | None, **data) -> tuple[str, dict]:
    return (f"@fake/{name}", {"rigforge_profile": load_profile(profile).model_dump(mode="json"),
                              "fake_responses": _replayed_facts(facts), "fake_delay": 0, "fake_delay_jitter": 0,
                              **data})


@deploy("Full-like")
def _preflight_then_change(with_probe: bool = False) -> None:
    preflight.apply_preflight(with_probe=with_probe)
    server.shell(name="A later change", commands=[LATER_CHANGE])


def _run(hosts: list[tuple[str, dict]], with_probe: bool = False) -> State:
    state = State(Inventory((hosts, {})), Config())
    connect_all(state)
    state.set_stage(StateStage.Prepare)
    add_deploy(state, _preflight_then_change, with_probe=with_probe)
    state.set_stage(StateStage.Execute)
    run_ops(state)
    return state


def _commands(state: State, name: str) -> list[str]:
    return state.inventory.get_host(f"@fake/{name}").connector.executed_commands


def test_blocking_host_stops_before_any_change_and_others_go_on(caplog: pytest.LogCaptureFixture) -> None:
    state = _run([_fake_host("h200", "2x-pix", DEVICE_RUN / "facts"), _fake_host("cpu", "sandbox", None)])
    assert [host.name for host in state.failed_hosts] == ["@fake/h200"]
    assert not any(LATER_CHANGE in command for command in _commands(state, "h200"))
    assert any(LATER_CHANGE in command for command in _commands(state, "cpu"))
    log = caplog.text
    assert "preflight @fake/h200: 10 ok, 8 warn, 2 fail (2 blocking: gpu-model, compute-capability)" in log
    assert "preflight @fake/cpu: " in log and "blocking check failed: gpu-model, compute-capability" in log


def test_no_gpu_host_fails_with_one_clear_line(caplog: pytest.LogCaptureFixture) -> None:
    state = _run([_fake_host("empty", "2x-pix", None), _fake_host("cpu", "sandbox", None)])
    assert [host.name for host in state.failed_hosts] == ["@fake/empty"]
    rows = [line for line in caplog.text.splitlines() if "[@fake/empty]" in line and " | fail" in line]
    assert len(rows) == 1 and NO_GPU in rows[0]


def test_skip_preflight_reports_and_continues() -> None:
    state = _run([_fake_host("h200", "2x-pix", DEVICE_RUN / "facts", skip_preflight=True),
                  _fake_host("cpu", "sandbox", None)])
    assert not state.failed_hosts
    assert any(LATER_CHANGE in command for command in _commands(state, "h200"))


def test_probe_report_is_read_and_judged(caplog: pytest.LogCaptureFixture) -> None:
    report = (DEVICE_RUN / "probe.json").read_text()
    timed_out = json.loads(report)
    timed_out["steps"][1].update(status="timeout", error="no result after 180 s: killed (a P2P or NCCL hang?)")
    hosts = []
    for name, output in (("good", report), ("hung", json.dumps(timed_out))):
        host_name, data = _fake_host(name, "2x-pix", DEVICE_RUN / "facts", skip_preflight=True,
                                     probe_python="python3")
        data["fake_responses"] = {"mktemp": "/tmp/rigforge-probe.TEST", "interconnect.py": output,
                                  **data["fake_responses"]}
        hosts.append((host_name, data))
    state = _run(hosts, with_probe=True)
    assert [host.name for host in state.failed_hosts] == ["@fake/hung"]
    assert "GPU0<->GPU1: peer access yes" in caplog.text
    assert "probe failed: p2p 0 1: timeout" in caplog.text
    ran = [command for command in _commands(state, "good") if "interconnect.py" in command]
    assert ran == ["env python3 /tmp/rigforge-probe.TEST/interconnect.py --step-timeout 180"]


def _cli(tmp_path: Path, profile: str, *args: str) -> subprocess.CompletedProcess:
    inventory = tmp_path / "inventory.py"
    inventory.write_text(
        "from rigforge.profile.loader import load_profile\n"
        f"here = [('@local', {{'rigforge_profile': load_profile({profile!r}).model_dump(mode='json')}})]\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "pyinfra", str(inventory), "deploys/preflight.py", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(Path("/proc/driver/nvidia").exists(), reason="this machine has an NVIDIA driver")
def test_cli_dry_run_exits_non_zero_on_a_blocking_failure(tmp_path: Path) -> None:
    result = _cli(tmp_path, "2x-pix", "--dry")
    assert result.returncode == 1, result.stderr[-2000:]
    assert NO_GPU in result.stderr and "Traceback" not in result.stderr
    assert "1 fail (1 blocking: gpus)" in result.stderr


def test_cli_skip_preflight_exits_zero(tmp_path: Path) -> None:
    result = _cli(tmp_path, "2x-pix", "-y", "--data", "skip_preflight=true")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "continuing because skip_preflight=true" in result.stderr or "No changes" in result.stderr


def test_probe_runs_on_a_host_the_tables_stop(caplog: pytest.LogCaptureFixture) -> None:
    # Read-only: the probe answers before the blocking stop, and the host still fails (exit non-zero).
    hosts = [_fake_host("h200", "2x-pix", DEVICE_RUN / "facts", probe_python="python3"),
             _fake_host("cpu", "sandbox", None, probe_python="python3")]
    for _, data in hosts:
        data["fake_responses"] = {"mktemp": "/tmp/rigforge-probe.TEST",
                                  "interconnect.py": (DEVICE_RUN / "probe.json").read_text(), **data["fake_responses"]}
    state = _run(hosts, with_probe=True)
    assert [host.name for host in state.failed_hosts] == ["@fake/h200"]
    assert any("interconnect.py" in command for command in _commands(state, "h200"))
    assert "probe: read-only, so it runs whatever the tables above block" in caplog.text
    assert "blocking check failed: gpu-model, compute-capability" in caplog.text
