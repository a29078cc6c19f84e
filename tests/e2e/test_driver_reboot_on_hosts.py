"""A driver updated without the reboot, on a real sandbox host: preflight and the doctor say a reboot is pending.

Stand-in: the NVIDIA driver. A container host has no GPU and no kernel module of its own, so the host gets the
stand-in nvidia-smi of tests/standins/nvidia_cuda_repo.py (the one the stand-in driver packages install) at
user-space version 595.45.04, and the stand-in "loaded module" file (/run/nvidia-standin/version, in the layout of
/proc/driver/nvidia/version) at 580.95.05: the state apt leaves between a driver upgrade and the reboot. The
stand-in then answers ``nvidia-smi --version`` as the real tool does ("Failed to initialize NVML:
Driver/library version mismatch"). Real: Debian 12 with systemd, SSH, the pyinfra CLI, every fact command,
deploys/preflight.py, ``python -m rigforge.doctor``.

A reboot empties /run (a tmpfs at every boot, the container host's too): the stand-in module file is gone, as the
old module is after a real reboot, and neither reader names a pending reboot any more.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rigforge.checks.driver_reboot import DOCTOR_ID
from rigforge.sandbox import SandboxHost, exec_in
from tests.e2e.conftest import Sandbox
from tests.e2e.pyinfra_run import REPO_ROOT, run_pyinfra
from tests.standins.nvidia_cuda_repo import (
    COMPUTE_APPS_FILE,
    LOADED_FILE,
    MODULE_FILE,
    NVIDIA_SMI,
    STANDIN_NOTE,
    module_version_line,
)

USER_SPACE, LOADED = "595.45.04", "580.95.05"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def updated(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SandboxHost, Path]]:
    """A host whose user-space driver is 595.45.04 while module 580.95.05 stays loaded, and its inventory."""
    host = sandbox.fresh_host("reboot-pending")
    smi = NVIDIA_SMI.format(note=STANDIN_NOTE, loaded=LOADED_FILE, module=MODULE_FILE, version=USER_SPACE,
                            apps=COMPUTE_APPS_FILE)
    module = module_version_line(LOADED, "x86_64")
    setup = (f"cat > /usr/bin/nvidia-smi && chmod 755 /usr/bin/nvidia-smi && install -d /run/nvidia-standin && "
             f"printf '%s\\n' {shlex.quote(module)} > {LOADED_FILE}")
    run = exec_in(host, setup, input_text=smi)
    assert run.returncode == 0, run.stderr
    answer = exec_in(host, "nvidia-smi --version")
    assert answer.returncode == 18 and "Driver/library version mismatch" in answer.stdout, answer.stdout
    yield host, sandbox.write_inventory(tmp_path_factory.mktemp("reboot") / "inventory.py", [host])


def doctor(inventory: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    run = subprocess.run([sys.executable, "-m", "rigforge.doctor", str(inventory)], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    print(run.stdout)
    return run


def test_the_doctor_names_the_pending_reboot(updated: tuple[SandboxHost, Path]) -> None:
    host, inventory = updated
    run = doctor(inventory)
    assert run.returncode == 1, run.stdout + run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith(f"| {host.name} |")]
    assert [row.split(" | ")[1:4] for row in rows] == [["driver", DOCTOR_ID, "fail"]], rows
    assert f"user-space driver {USER_SPACE}, the loaded kernel module refused" in rows[0]
    assert "reboot the rig" in rows[0] and "--data allow_reboot=true" in rows[0]


def table_row(output: str, name: str) -> list[str]:
    """The cells of preflight's row ``name``, its wrapped lines joined (pyinfra's ``[host] `` prefix removed)."""
    bodies = [re.sub(r"^\s*\[[^\]]+\] ?", "", line) for line in output.splitlines()]
    start = next(index for index, body in enumerate(bodies) if body.startswith(f"{name} "))
    lines = [bodies[start]]
    for body in bodies[start + 1:]:
        if not body.startswith(" ") or " | " not in body:
            break
        lines.append(body)
    columns = zip(*(line.split(" | ") for line in lines if line.count(" | ") == 4), strict=True)
    return [" ".join(part.strip() for part in column if part.strip()) for column in columns]


def test_preflight_names_it_with_the_reboot_as_the_fix(updated: tuple[SandboxHost, Path]) -> None:
    _, inventory = updated
    result = run_pyinfra(inventory, "deploys/preflight.py", check=False)
    output = ANSI.sub("", result.stderr + result.stdout)
    assert result.returncode == 0, output[-3000:]  # a warning: the deploy's reboot fixes it
    name, _, found, verdict, fix = table_row(output, "driver-reboot")
    assert (name, verdict) == ("driver-reboot", "warn"), output[-4000:]
    assert found.startswith(f"user-space driver {USER_SPACE}, the loaded kernel module refused"), found
    assert "a reboot is pending" in fix and "--data allow_reboot=true" in fix, fix
    print(f"driver-reboot | {found} | {verdict} | {fix}")


def test_after_the_reboot_neither_names_it(updated: tuple[SandboxHost, Path]) -> None:
    host, inventory = updated
    exec_in(host, "systemctl reboot")
    # Docker starts the container again (--restart always); /run is fresh, so the old module file is gone.
    deadline = time.monotonic() + 180
    while True:
        back = exec_in(host, f"systemctl is-system-running --wait >/dev/null 2>&1; test ! -e {LOADED_FILE}")
        if back.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert back.returncode == 0, back.stdout + back.stderr
    run = doctor(inventory)
    assert DOCTOR_ID not in run.stdout, run.stdout
    assert f"| {host.name} | kernel, engine, bench, driver | none |" in run.stdout, run.stdout
