"""What is already there, on a real sandbox host: another process on the engine's port blocks the preflight
deploy before any change, naming its pid; apt's lock held by another process is named; freed, it passes.

Real here: Debian 12 with systemd, SSH, the pyinfra CLI, every fact command (ss, /proc/locks, dpkg,
apt-cache, modinfo and nvidia-smi absent as on a fresh rig), a listener started as a unit of the owner's,
and an fcntl lock on /var/lib/dpkg/lock-frontend as apt and unattended-upgrades take it. GPUs cannot exist
here: the GPU-process row is proven on a real nvidia-smi capture (tests/unit/test_takeover_rows.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rigforge.profile.loader import load_profile
from rigforge.sandbox import SandboxHost, exec_in
from tests.e2e.conftest import Sandbox
from tests.e2e.pyinfra_run import run_pyinfra
from tests.e2e.serve_helpers import hold_port, service_show

DEPLOY = "deploys/preflight.py"
PORT = load_profile("sandbox").engine.port
ANSI = re.compile(r"\x1b\[[0-9;]*m")
LOCK = ("import fcntl, time; f = open('/var/lib/dpkg/lock-frontend', 'w'); fcntl.lockf(f, fcntl.LOCK_EX); "
        "time.sleep(3600)")


@pytest.fixture(scope="module")
def owned_host(sandbox: Sandbox) -> SandboxHost:
    return sandbox.fresh_host("takeover")


def table(output: str, host: SandboxHost) -> list[str]:
    """The "what is already there" table of one host from pyinfra's log, its prefix removed."""
    prefix = f"[{host.name}] "
    lines = [line.split(prefix, 1)[1] for line in ANSI.sub("", output).splitlines() if prefix in line]
    start = lines.index("what is already there:") + 1
    end = next((index for index in range(start, len(lines)) if " | " not in lines[index]
                and not lines[index].startswith("-")), len(lines))
    return lines[start:end]


def test_a_foreign_listener_on_the_engine_port_blocks(sandbox: Sandbox, owned_host: SandboxHost,
                                                      tmp_path: Path) -> None:
    inventory = sandbox.write_inventory(tmp_path / "inventory.py", [owned_host], "sandbox")
    listener = hold_port(owned_host, PORT)
    assert exec_in(owned_host, f"systemd-run --unit=apt-holder python3 -c {LOCK!r}").returncode == 0
    locker = int(service_show(owned_host, "MainPID", unit="apt-holder.service")["MainPID"])
    before = exec_in(owned_host, "dpkg-query -W; ls -lR /etc | md5sum").stdout
    try:
        result = run_pyinfra(inventory, DEPLOY, check=False)
    finally:
        exec_in(owned_host, "systemctl stop port-holder apt-holder")
    output = ANSI.sub("", result.stderr + result.stdout)
    rows = table(output, owned_host)
    stops = [line for line in output.splitlines() if "already there: " in line]
    print("\n".join(rows + stops))  # shown with -s: the docs' example
    assert result.returncode != 0, output[-3000:]
    port_row = next(row for row in rows if row.startswith("engine-port"))
    assert f"{PORT}: pid {listener} (python3)" in port_row and "blocked" in port_row, rows
    assert any(row.startswith("apt-lock") and f"(pid {locker})" in row for row in rows), rows
    assert f"already there: engine-port: {PORT}: pid {listener} (python3) on 127.0.0.1:{PORT}" in output
    assert "already there: blocking check failed: engine-port; nothing was changed on this host" in output
    assert exec_in(owned_host, "dpkg-query -W; ls -lR /etc | md5sum").stdout == before

    freed = run_pyinfra(inventory, DEPLOY, check=False)
    freed_rows = table(ANSI.sub("", freed.stderr), owned_host)
    assert freed.returncode == 0, freed.stderr[-3000:]
    assert any(row.startswith("engine-port") and f"{PORT}: free" in row for row in freed_rows), freed_rows
    assert not [row for row in freed_rows if "block" in row], freed_rows


def test_a_gpu_profile_says_its_trade_offs_before_a_dry_run_changes_anything(
        sandbox: Sandbox, owned_host: SandboxHost, tmp_path: Path) -> None:
    # The 4x profile against this CPU-only host: its dry run stops at the preflight (no GPUs), but what is
    # already there, and the trade-offs, come first. Nothing is installed: no stand-in repository is needed.
    inventory = sandbox.write_inventory(tmp_path / "inventory4x.py", [owned_host], "4x-threadripper")
    before = exec_in(owned_host, "dpkg-query -W; ls -lR /etc | md5sum").stdout
    result = run_pyinfra(inventory, "deploys/full.py", dry=True, check=False)
    output = ANSI.sub("", result.stderr + result.stdout)
    lines = table(output, owned_host)
    rows = lines[next(index for index, row in enumerate(lines) if row.startswith("trade-off")):]
    said = [line.split(f"[{owned_host.name}] ", 1)[1] for line in output.splitlines()
            if f"[{owned_host.name}] trade-off: " in line]
    print("\n".join(said + lines[:2] + rows))  # shown with -s: the docs' example
    assert [line.split(":")[1].strip().split(" ")[0] for line in said] == ["boot.kernel_params", "engine.host",
                                                                           "engine.flags"], said
    assert said[0].startswith("trade-off: boot.kernel_params mitigations=off: gives up")
    assert "source: rig-facts §1.4" in said[0]
    assert said[1].startswith("trade-off: engine.host 0.0.0.0:") and "requests need the rig's API key" in said[1]
    assert said[2].startswith("trade-off: engine.flags --trust-remote-code:")
    assert sum(row.startswith("trade-off") for row in rows) == 3 and "block" not in "".join(rows)
    assert exec_in(owned_host, "dpkg-query -W; ls -lR /etc | md5sum").stdout == before
