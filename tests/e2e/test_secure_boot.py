"""Secure Boot on with DKMS's signing key not enrolled: deploys/full.py refuses before any change, with and
without ``skip_preflight=true``, and names the fix; once the key is enrolled the preflight row passes and a
dry run plans the driver.

Real here: the Debian 12 systemd host over SSH, the pyinfra CLI, the SecureBoot fact's command and its shell,
and DKMS's certificate: a real X.509 certificate made with openssl exactly as dkms 3.0.10 makes
/var/lib/dkms/mok.pub at its first signing.

STAND-INS, because no machine here has Secure Boot (a container has no EFI firmware, Docker masks
/sys/firmware, and the CI machine boots without EFI): ``mokutil`` (tests/standins/mokutil.py, mokutil 0.6.0's
lines and exit statuses, answering from a state file; "enrolling" writes the certificate's hash to it, which
on a real rig is the person confirming at the console after a reboot); NVIDIA's repository
(tests/standins/nvidia_cuda_repo.py) for the dry run that plans the driver.

The tests share one host and run in file order; a failed step skips the rest.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyinfra_run import PyinfraResult, run_pyinfra

from rigforge.facts.secure_boot import DKMS_CERT, DKMS_KEY
from rigforge.sandbox import SandboxHost, exec_in
from rigforge.sandbox.docker import docker
from tests.standins import mokutil
from tests.standins.nvidia_cuda_repo import build_repo, serve_in_host

if TYPE_CHECKING:
    from conftest import Sandbox

PROFILE = "2x-pix"
DRIVER = "595.45.04"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Everything a driver change or the host layer would touch: files, packages, holds, units, pending reboots.
SNAPSHOT = (
    "find /etc /boot /usr/local /var/lib/apt/lists /var/lib/dkms -xdev -printf '%p %m %U %G %s %T@\\n' | sort "
    "| sha256sum; find /etc /boot /usr/local /var/lib/dkms -xdev -type f -exec sha256sum {} + | sort | sha256sum; "
    "dpkg -l | sha256sum; apt-mark showhold; systemctl list-unit-files --no-legend | sha256sum; "
    "ls /run/rigforge 2>/dev/null; true"
)
FIX = f"mokutil --import {DKMS_CERT} (it asks for a one-time password); reboot and, at the console, confirm"


@dataclass
class Rig:
    host: SandboxHost
    inventory: Path
    done: list[str] = field(default_factory=list)

    def sh(self, command: str, input_text: str | None = None) -> str:
        proc = exec_in(self.host, command, input_text=input_text)
        assert proc.returncode == 0, f"{command}: {proc.stderr}"
        return proc.stdout

    def require(self, step: str) -> None:
        if step not in self.done:
            pytest.skip(f"needs the earlier step {step!r}, which did not pass")


def _dkms_key(workdir: Path) -> tuple[Path, Path]:
    """The key and certificate as dkms 3.0.10's prepare_signing makes them (openssl, DER certificate)."""
    key, cert = workdir / "mok.key", workdir / "mok.pub"
    subprocess.run(["openssl", "req", "-new", "-x509", "-nodes", "-days", "36500", "-subj",
                    "/CN=DKMS module signing key", "-newkey", "rsa:2048", "-keyout", str(key), "-outform", "DER",
                    "-out", str(cert)], check=True, capture_output=True)
    return key, cert


@pytest.fixture(scope="module")
def rig(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Rig:
    host = sandbox.fresh_host("secureboot")
    repo = build_repo(tmp_path_factory.mktemp("standin-repo"))
    serve_in_host(repo, host.container)
    exec_in(host, mokutil.install_command("enabled"), input_text=mokutil.SCRIPT).check_returncode()
    key, cert = _dkms_key(tmp_path_factory.mktemp("dkms"))
    exec_in(host, "install -d -m 755 /var/lib/dkms").check_returncode()
    docker("cp", str(key), f"{host.container}:{DKMS_KEY}")
    docker("cp", str(cert), f"{host.container}:{DKMS_CERT}")
    exec_in(host, f"chown root:root {DKMS_KEY} {DKMS_CERT} && chmod 600 {DKMS_KEY}").check_returncode()
    inventory = sandbox.write_inventory(tmp_path_factory.mktemp("inventory") / "inventory.py", [host], PROFILE,
                                        repo.profile_overrides(DRIVER))
    return Rig(host, inventory)


def _log(result: PyinfraResult) -> str:
    return ANSI.sub("", result.stderr + result.stdout)


def _row(log: str, name: str) -> list[str]:
    """The preflight table's row ``name`` as cells, its wrapped lines joined (check, expected, found, verdict, fix).

    The "what is already there" table, printed first, has a row of that name too: the last one is the checks'.
    """
    cells: list[str] | None = None
    joining = False
    for line in log.splitlines():
        _, bracket, rest = line.partition("] ")
        # Table lines are right-stripped: a row whose last cells are empty ends in " |".
        parts = [part.strip() for part in (rest + " ").split(" | ")] if bracket else []
        if len(parts) != 5:
            joining = False
        elif parts[0] == name:
            cells, joining = parts, True
        elif joining and cells is not None and parts[0] == "":
            cells = [f"{cell} {part}".strip() for cell, part in zip(cells, parts, strict=True)]
        else:
            joining = False
    assert cells is not None, f"no {name} row in the preflight table"
    return cells


def test_full_deploy_refuses_before_any_change_and_names_the_fix(rig: Rig) -> None:
    assert rig.sh(f"mokutil --test-key {DKMS_CERT}; true").strip() == f"{DKMS_CERT} is not enrolled"
    before = rig.sh(SNAPSHOT)
    result = run_pyinfra(rig.inventory, "deploys/full.py", "--data", "bench=false", check=False)
    log = _log(result)
    assert result.returncode != 0 and "Traceback" not in log, log[-3000:]
    row = _row(log, "secure-boot")
    assert row[2:4] == [f"on; {DKMS_CERT} is not enrolled", "fail (blocking)"], row
    assert row[4].startswith(FIX), row
    # The sandbox host has no GPU either: both rows block (the gpus row is test_preflight.py's).
    assert re.search(rf"preflight {rig.host.name}: .*blocking: gpus, secure-boot\)", log), log[-3000:]
    assert rig.sh(SNAPSHOT) == before, "the refused deploy changed the host"
    rig.done.append("refused")


def test_skip_preflight_does_not_pass_the_driver_guard(rig: Rig) -> None:
    rig.require("refused")
    before = rig.sh(SNAPSHOT)
    result = run_pyinfra(rig.inventory, "deploys/full.py", "--data", "skip_preflight=true", "--data", "bench=false",
                         check=False)
    log = _log(result)
    assert result.returncode != 0 and "Traceback" not in log, log[-3000:]
    lines = [line for line in log.splitlines() if "the driver change refused" in line]
    assert len(lines) == 1, log[-3000:]
    print(lines[0])  # the docs' real output line
    assert f"secure boot on; {DKMS_CERT} is not enrolled: the driver change refused (" in lines[0]
    assert "Key was rejected by service" in lines[0] and "nothing was changed on this host; fix: " + FIX in lines[0]
    assert rig.sh(SNAPSHOT) == before, "the refused host layer changed the host"
    rig.done.append("guarded")


def test_enrolled_key_passes_the_row_and_the_driver_is_planned(rig: Rig) -> None:
    rig.require("guarded")
    rig.sh(mokutil.enroll_command(DKMS_CERT))
    preflight = run_pyinfra(rig.inventory, "deploys/preflight.py", check=False)
    log = _log(preflight)
    row = _row(log, "secure-boot")
    assert row[3] == "ok" and row[2] == (f"on; {DKMS_CERT} enrolled ({DKMS_CERT} is already enrolled): modules "
                                         f"will be signed with {DKMS_CERT}"), row
    assert re.search(rf"preflight {rig.host.name}: .*\(1 blocking: gpus\)", log), log[-3000:]

    before = rig.sh(SNAPSHOT)
    plan = run_pyinfra(rig.inventory, "deploys/host.py", dry=True)
    changed = {op["name"] for op in plan.plan if op.get("hosts_with_change")}
    assert not any("Refuse a driver Secure Boot would reject" in name for name in changed), changed
    assert any(f"Install the NVIDIA open driver {DRIVER}" in name for name in changed), changed
    assert rig.sh(SNAPSHOT) == before, "the dry run changed the host"
