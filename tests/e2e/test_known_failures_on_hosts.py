"""Known failures on a real sandbox host: the engine really fails, the rig says which failure and its fix.

Real here: Debian 12 with systemd, llama.cpp's server (xllamacpp) under systemd, its journal, SSH, the
pyinfra CLI, the wait script, the doctor. One host, tests in order, each starting where the last ended:

1. a healthy deploy, a second one that plans nothing; the doctor reports nothing, then a real driver error
   line no signature knows as unrecognised; a bench below its floor reads the logs of its window (nothing
   known there);
2. three deploys whose engine fails, each ending with the known failure and its fix in one line above the
   journal excerpt: a flag value out of range, the engine's port taken by another process, the model
   file corrupted with its size and time kept (the deploy's cheap weights check cannot see it);
3. the model file gone and a kernel-log line planted: the doctor names both, preflight blocks on the
   kernel one, the verify suite fails it, and ``--since`` after the plant leaves the kernel line out.

Stand-in: the kernel-log lines. A container host has no kernel of its own (its journald reads no kmsg),
so the test writes the line into the host's journal with the kernel's syslog identifier (``logger -t
kernel``): the very entries the fact reads as the kernel log (``SYSLOG_IDENTIFIER=kernel``), as journald
files the real kernel's. The lines are NVIDIA's Xid 79 text (inventory/known-failures.yaml) and a driver
failure quoted in a public thread that no signature knows.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rigforge.known_failures import hit_line, known_signatures, match_lines
from rigforge.profile.loader import load_profile
from rigforge.sandbox import SandboxHost, exec_in
from rigforge.sandbox.model import ensure_gemma
from rigforge.serving.engines import UNIT_NAME
from tests.e2e.conftest import Sandbox
from tests.e2e.pyinfra_run import REPO_ROOT, PyinfraResult, assert_no_changes, run_pyinfra
from tests.e2e.serve_helpers import hold_port

DEPLOY = "deploys/serve.py"
PROFILE = load_profile("sandbox")
MODEL_FILE = f"{PROFILE.model.path}/{PROFILE.model.files[0].name}"
#: A failing engine is seen within seconds (it exits, systemd restarts it): a short wait is a bound only.
FAIL_FAST = {"engine": {"health_timeout_s": 40}}
XID_79 = "NVRM: Xid (PCI:0000:41:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
#: A real driver failure line no signature knows (https://github.com/NVIDIA/open-gpu-kernel-modules/issues/943).
UNKNOWN_NVRM = "NVRM: s_prepareForFwsec_TU102: failed to prepare interface data for FWSEC cmd 0x15: 0x25"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Rig:
    sandbox: Sandbox
    host: SandboxHost
    overrides: dict
    tmp: Path

    def inventory(self, name: str, extra: dict | None = None) -> Path:
        """An inventory for the rig with the model from this machine and more profile overrides."""
        overrides = {**self.overrides, **(extra or {})}
        return self.sandbox.write_inventory(self.tmp / f"{name}.py", [self.host], "sandbox", overrides)

    def sh(self, command: str) -> str:
        run = exec_in(self.host, command)
        assert run.returncode == 0, f"{command}: {run.stderr}"
        return run.stdout


@pytest.fixture(scope="module")
def rig(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    model = ensure_gemma(REPO_ROOT / ".cache" / "models")
    yield Rig(sandbox, sandbox.fresh_host("known"), {"model": {"local_path": str(model)}},
              tmp_path_factory.mktemp("known"))


def expected_line(signature_id: str) -> str:
    """The line the wait script prints for a signature (the matcher's own wording)."""
    signature = next(s for s in known_signatures() if s.id == signature_id)
    return hit_line(match_lines([signature.as_data()], signature.examples[:1], signature.where[0])[0])


def assert_named_above_the_journal(result: PyinfraResult, signature_id: str) -> None:
    """The deploy failed, and its output names the failure and fix in one line before the journal excerpt."""
    output = ANSI.sub("", result.stderr + result.stdout)
    assert result.returncode != 0, output[-3000:]
    lines = output.splitlines()
    named = [index for index, line in enumerate(lines) if "known failure " in line]
    excerpt = [index for index, line in enumerate(lines) if f"{UNIT_NAME}: last journal lines:" in line]
    assert named and excerpt, output[-4000:]
    shown = "\n".join(lines[named[0] - 1:excerpt[0] + 1])
    assert any(lines[index].endswith(expected_line(signature_id)) for index in named), shown
    assert named[-1] < excerpt[0], shown
    print("\n".join(lines[named[0] - 1:excerpt[0] + 4]))  # shown with -s: the docs' example


def doctor(rig: Rig, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    run = subprocess.run([sys.executable, "-m", "rigforge.doctor", str(rig.inventory("doctor")), *args],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    print(run.stdout)
    return run


def test_healthy_rig_the_doctor_reports_nothing(rig: Rig) -> None:
    run_pyinfra(rig.inventory("healthy"), DEPLOY)
    assert_no_changes(rig.inventory("healthy"), DEPLOY)  # the wait script, matcher inlined, is stable
    run = doctor(rig)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"| {rig.host.name} | kernel, engine, bench, driver | none |" in run.stdout
    rig.sh(f"logger -t kernel {UNKNOWN_NVRM!r}")  # the stand-in (module docstring)
    run = doctor(rig)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"| {rig.host.name} | kernel | unrecognised-error-lines | unrecognised | 1 |" in run.stdout, run.stdout
    assert UNKNOWN_NVRM in run.stdout


def test_a_bench_below_its_floor_reads_the_logs_of_its_window(rig: Rig) -> None:
    """One short cell and an unreachable floor: the bench fails, then says what its window's logs show."""
    floor = {"concurrency": 1, "input_tokens": 128, "min_output_tps": 100000, "min_decode_tps_per_user": 1}
    slow = {"bench": {"concurrency": [1], "repeats": 1, "cell_seconds": 3, "floors": [floor]}}
    result = run_pyinfra(rig.inventory("bench", slow), "deploys/bench.py", check=False)
    output = ANSI.sub("", result.stderr)
    assert result.returncode != 0 and "bench FAIL on" in output, output[-3000:]
    said = re.search(r".*bench: no known failure in the engine journal, kernel log or bench lines since "
                     r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", output)
    assert said, output[-3000:]
    print("\n".join(line for line in output.splitlines() if "bench FAIL on" in line) + "\n" + said.group(0))


def test_a_flag_out_of_range_is_named(rig: Rig) -> None:
    flags = {**PROFILE.engine.flags, "--batch-size": 4_000_000_000}
    result = run_pyinfra(rig.inventory("flag", {**FAIL_FAST, "engine": {**FAIL_FAST["engine"], "flags": flags}}),
                         DEPLOY, check=False)
    assert_named_above_the_journal(result, "llama-flag-out-of-range")


def test_the_port_taken_is_named(rig: Rig) -> None:
    rig.sh(f"systemctl stop {UNIT_NAME}")
    holder = hold_port(rig.host, PROFILE.engine.port)
    try:
        # Without the switch the deploy stops before starting the engine (tests/e2e/test_takeover_table.py);
        # past it, the engine meets the port taken and the health wait names the failure.
        result = run_pyinfra(rig.inventory("port", FAIL_FAST), DEPLOY, "--data", "skip_preflight=true", check=False)
    finally:
        # The engine first: freed, the port would let its next automatic restart come up healthy.
        rig.sh(f"systemctl stop {UNIT_NAME}; systemctl stop port-holder")
    assert f"pid {holder} (python3)" in ANSI.sub("", result.stderr)  # the table named it first
    assert_named_above_the_journal(result, "llama-port-in-use")


def test_a_corrupted_model_file_is_named(rig: Rig) -> None:
    rig.sh(f"systemctl stop {UNIT_NAME}")
    # The GGUF magic overwritten, size and mtime kept: the manifest still trusts the file.
    corrupt = ("import os, sys; p = sys.argv[1]; s = os.stat(p); f = open(p, 'r+b'); f.write(b'XXXX'); f.close(); "
               "os.utime(p, ns=(s.st_atime_ns, s.st_mtime_ns))")
    assert exec_in(rig.host, ["python3", "-c", corrupt, MODEL_FILE]).returncode == 0
    result = run_pyinfra(rig.inventory("corrupt", FAIL_FAST), DEPLOY, check=False)
    assert_named_above_the_journal(result, "llama-model-file-corrupt")


def test_doctor_preflight_and_verify_name_a_missing_model_and_a_kernel_line(rig: Rig) -> None:
    rig.sh(f"mv {MODEL_FILE} /root/moved.gguf && systemctl restart {UNIT_NAME}")
    rig.sh(f"logger -t kernel {XID_79!r}")  # the stand-in (module docstring)
    # The engine fails at once (no such file); wait until its journal says so.
    rig.sh(f"timeout 60 sh -c 'until journalctl -u {UNIT_NAME} -q -o cat | grep -q \"failed to open GGUF\"; do "
           "sleep 1; done'")
    run = doctor(rig)
    assert run.returncode == 1, run.stdout + run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith(f"| {rig.host.name} |")]
    assert [row.split(" | ")[1:4] for row in rows] == [["kernel", "xid-79-fallen-off-bus", "blocking"],
                                                       ["engine", "llama-model-file-missing", "fail"]], rows

    preflight = run_pyinfra(rig.inventory("preflight"), "deploys/preflight.py", check=False)
    output = ANSI.sub("", preflight.stderr)
    assert preflight.returncode != 0
    assert re.search(r"known-failures +\| no known failure .*\| fail \(blocking\)", output), output[-4000:]
    assert "2 fail (1 blocking: known-failures)" in output, output[-2000:]

    verify = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             f"--hosts=paramiko://{rig.host.name}", f"--ssh-config={rig.sandbox.state_dir}/ssh_config",
                             "--profile", "sandbox", "tests/verify/test_gpus.py", "-k", "known-failures"],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert verify.returncode == 1 and "xid-79-fallen-off-bus in the kernel log" in verify.stdout, verify.stdout[-3000:]

    since = rig.sh("sleep 1; date '+%Y-%m-%d %H:%M:%S'").strip()
    later = doctor(rig, "--since", since)
    # The engine keeps failing (systemd restarts it every 10 s), so its row may or may not fall in the window.
    assert f"| {rig.host.name} |" in later.stdout and "xid-79-fallen-off-bus" not in later.stdout, later.stdout
