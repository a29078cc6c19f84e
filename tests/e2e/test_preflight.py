"""Preflight against a real sandbox host (Debian 12, systemd, SSH): no GPU there, so a GPU profile must
fail with one clear line and change nothing, and the CPU-only sandbox profile must pass.

Real here: the host, SSH, the pyinfra CLI, every fact command (nvidia-smi and lspci are absent, as on
a fresh rig; the PCI bus is read from sysfs) and deploys/full.py's first layers. One host serves all
tests of this module.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyinfra_run import assert_no_changes, run_pyinfra

from rigforge.checks import NO_GPU
from rigforge.operations.lock import TAKE_NAME
from rigforge.sandbox import SandboxHost, exec_in
from roles.takeover import STOP_NAME as TAKEOVER_STOP
from roles.takeover import TITLE as TAKEOVER

if TYPE_CHECKING:
    from conftest import Sandbox

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def preflight_host(sandbox: Sandbox) -> SandboxHost:
    return sandbox.fresh_host("preflight")


@pytest.fixture(scope="module")
def second_host(sandbox: Sandbox) -> SandboxHost:
    return sandbox.fresh_host("preflight-ok")


def _mixed_inventory(sandbox: Sandbox, path: Path, gpu_rig: SandboxHost, cpu_box: SandboxHost) -> Path:
    """One host with the 2x-pix profile (fails: no GPU), one with the sandbox profile (passes)."""
    path.write_text("from rigforge.inventory import sandbox_hosts\n\n"
                    f"gpu_rig = sandbox_hosts({str(sandbox.state_dir)!r}, '2x-pix', names=[{gpu_rig.name!r}])\n"
                    f"cpu_box = sandbox_hosts({str(sandbox.state_dir)!r}, 'sandbox', names=[{cpu_box.name!r}])\n")
    return path


def _rows(output: str, verdict: str) -> list[str]:
    """Table rows (first lines) with this verdict, from pyinfra's log."""
    lines = ANSI.sub("", output).splitlines()
    return [line for line in lines if re.search(rf"\| {re.escape(verdict)}\b", line) and re.search(r"\]\s+[a-z]", line)]


def test_gpu_profile_without_gpu_fails_with_one_clear_line(sandbox: Sandbox, preflight_host: SandboxHost,
                                                           second_host: SandboxHost, tmp_path: Path) -> None:
    inventory = _mixed_inventory(sandbox, tmp_path / "inventory.py", preflight_host, second_host)
    result = run_pyinfra(inventory, "deploys/preflight.py", check=False)
    output = result.stderr + result.stdout
    assert result.returncode != 0
    assert "Traceback" not in output
    fails = _rows(output, "fail")
    assert len(fails) == 1 and NO_GPU in fails[0] and "fail (blocking)" in fails[0], fails
    assert re.search(rf"preflight {preflight_host.name}: \d+ ok, \d+ warn, 1 fail \(1 blocking: gpus\)", output)
    # Only that host failed; the other one went on.
    assert result.data is not None and result.data["results"]["failed_hosts"] == [preflight_host.name]
    assert f"preflight {second_host.name}: " in output

    dry = run_pyinfra(inventory, "deploys/preflight.py", dry=True, check=False)
    assert dry.returncode != 0 and NO_GPU in dry.stderr
    changes = {op["name"]: op["hosts_with_change"] for op in dry.plan if op["hosts_with_change"]}
    assert changes == {"Preflight | Stop when a blocking check fails": [preflight_host.name]}


def test_full_deploy_stops_before_changing_anything(sandbox: Sandbox, preflight_host: SandboxHost,
                                                    tmp_path: Path) -> None:
    inventory = sandbox.write_inventory(tmp_path / "inventory.py", [preflight_host], "2x-pix")
    result = run_pyinfra(inventory, "deploys/full.py", "--data", "bench=false", check=False)
    log = ANSI.sub("", result.stderr)
    assert result.returncode != 0, log[-3000:]
    assert "blocking check failed: gpus" in log
    # The stop is the first operation after the deploy lock and the table of what is already there (nothing
    # of the owner's here: it lets the host go on); pyinfra starts no other one on a failed host (here its
    # only host). The lock stays, as after any failed run: this controller's next run takes it over.
    started = re.findall(r"--> Starting operation: (.*)", log)
    assert [name.strip() for name in started] == [TAKE_NAME, f"{TAKEOVER} | {TAKEOVER_STOP}",
                                                  "Preflight | Stop when a blocking check fails"], started
    # The base role would have recorded the profile: it never ran.
    assert exec_in(preflight_host, "test -e /etc/rigforge/profile.json").returncode != 0


def test_sandbox_profile_passes_and_changes_nothing(sandbox: Sandbox, preflight_host: SandboxHost,
                                                    tmp_path: Path) -> None:
    inventory = sandbox.write_inventory(tmp_path / "inventory.py", [preflight_host], "sandbox")
    result = run_pyinfra(inventory, "deploys/preflight.py")
    output = result.stderr + result.stdout
    assert _rows(output, "fail") == [] and "0 fail" in output
    assert_no_changes(inventory, "deploys/preflight.py")
