"""The interconnect probe: hard step timeouts, its report from the real 2x H200 run, how it is started.

The GPU steps themselves ran on the lent 2x H200 machine (tests/fixtures/device-run/probe.json);
here the supervisor runs for real with plain Python steps (no GPU or torch on this machine).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rigforge.probe import PROBE_SCRIPT, probe_argv, probe_failures, probe_lines
from rigforge.probe.interconnect import SAFE_ENV, run_step
from rigforge.probe.report import probe_shell_command
from tests.support_checks import DEVICE_RUN, profile, with_profile

REPORT = json.loads((DEVICE_RUN / "probe.json").read_text())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child that nobody reaped yet is a zombie: gone for our purpose.
    status = Path(f"/proc/{pid}/stat")
    return status.exists() and status.read_text().split(")")[-1].split()[0] != "Z"


def test_a_hanging_step_and_its_children_are_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    # The step starts a child of its own (as the all-reduce step starts one process per GPU), then hangs.
    hang = ("import subprocess, sys, time; "
            f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
            f"open({str(pid_file)!r}, 'w').write(str(child.pid)); print('{{\"partial\": true}}', flush=True); "
            "time.sleep(600)")
    started = time.monotonic()
    outcome = run_step([sys.executable, "-c", hang], timeout_s=5)
    assert outcome["status"] == "timeout" and "killed" in outcome["error"]
    assert outcome["result"] == {"partial": True}  # what the step printed before it hung is kept
    assert time.monotonic() - started < 60
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child)


def test_step_results_and_errors() -> None:
    ok = run_step([sys.executable, "-c", "print('noise'); print('{\"value\": 1}')"], timeout_s=30)
    assert (ok["status"], ok["result"]) == ("ok", {"value": 1})
    crashed = run_step([sys.executable, "-c", "raise SystemExit('CUDA error: peer access is not supported')"], 30)
    assert crashed["status"] == "error" and crashed["error"] == "CUDA error: peer access is not supported"
    silent = run_step([sys.executable, "-c", "pass"], timeout_s=30)
    assert silent["status"] == "error"


def test_supervisor_without_torch_reports_instead_of_crashing() -> None:
    try:
        import torch  # noqa: F401

        pytest.skip("torch is installed here: the inventory step would run for real")
    except ImportError:
        pass
    result = subprocess.run([sys.executable, str(PROBE_SCRIPT), "--step-timeout", "60"], capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False and report["env"] == SAFE_ENV
    assert [step["status"] for step in report["steps"]] == ["error"]
    assert "torch" in probe_failures(report)[0]


def test_real_report_from_two_h200s() -> None:
    assert probe_failures(REPORT) == []
    lines = probe_lines(REPORT)
    assert lines[0].startswith("2 GPUs (NVIDIA H200); torch 2.11.0+cu130")
    assert lines[1].startswith("GPU0<->GPU1: peer access yes; 0->1 ")
    assert lines[2].startswith("all-reduce over 2 GPUs (sum correct): 8 KiB ")
    sizes = REPORT["steps"][2]["result"]["sizes"]
    assert [row["bytes"] for row in sizes][:8] == [8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10,
                                                   512 << 10, 1 << 20]
    # NVLink 4 between the two H200s: far above any PCIe 5.0 x16 link (~64 GB/s per direction).
    bandwidth = REPORT["steps"][1]["result"]["bandwidth_gbs"]
    assert min(bandwidth["0->1"], bandwidth["1->0"]) > 100 and bandwidth["bidirectional"] > 200
    assert all("graph_latency_us" in row for row in sizes)


def test_failures_are_named() -> None:
    broken = json.loads(json.dumps(REPORT))
    broken["steps"][1].update(status="timeout", error="no result after 180 s: killed (a P2P or NCCL hang?)")
    broken["steps"][2]["result"]["correct"] = False
    assert probe_failures(broken) == [
        "p2p 0 1: timeout: no result after 180 s: killed (a P2P or NCCL hang?)",
        "allreduce: wrong sum (data corrupted between GPUs)",
    ]
    assert probe_failures(None) == ["the probe printed no report"]
    one_gpu = {"steps": [{"step": "inventory", "status": "ok", "result": {"device_count": 1}}]}
    assert "no pair to probe" in probe_failures(one_gpu)[0]


def test_how_the_probe_is_started() -> None:
    script = "/tmp/rigforge-probe.X/interconnect.py"
    with_nccl_env = profile("8x-turin")
    assert with_nccl_env.nccl is not None and with_nccl_env.nccl.env
    explicit = probe_argv(with_nccl_env, script, "/opt/venv/bin/python3")
    assert explicit[0] == "env" and explicit[-2:] == ["/opt/venv/bin/python3", script]
    assert "NCCL_P2P_LEVEL=SYS" in explicit
    assert probe_argv(profile("sandbox"), script) == ["env", "python3", script]
    with pytest.raises(ValueError):
        probe_argv(profile("sandbox"), script, "python3; reboot")
    assert probe_shell_command(["env", "python3", script], 180) == f"env python3 {script} --step-timeout 180"


def test_container_engines_run_the_probe_in_their_image() -> None:
    pytest.importorskip("rigforge.serving.engines")
    pulled = with_profile(profile("2x-pix"), engine={"build": None, "image": "lmsysorg/sglang:v0.5.9-cu130"})
    argv = probe_argv(pulled, "/tmp/rigforge-probe.X/interconnect.py")
    assert argv[1:5] == ["run", "--rm", "--name", "rigforge-probe"]
    assert "--gpus" in argv and "--network=host" in argv and "--ipc=host" in argv
    # The engine's own environment (NCCL settings, graph XML path) reaches the probe.
    assert argv[argv.index("--env-file") + 1] == "/etc/rigforge/engine.env"
    assert argv[-3:] == ["lmsysorg/sglang:v0.5.9-cu130", "python3", "/tmp/rigforge-probe.X/interconnect.py"]
    assert "/tmp/rigforge-probe.X:/tmp/rigforge-probe.X:ro" in argv
