"""A power cut in the middle of apt, on a real sandbox host: the same command afterwards finishes the job.

Real here: a Debian 12 host with systemd, apt 2.6 and dpkg 1.21 with Debian's archive, ``deploys/host.py``
(whose first change installs the base packages), rigforge's record of its own apt transaction, and the power
cut itself: the whole host SIGKILLed (``docker kill``: no shutdown) and started again. Test machinery
(tests/e2e/power_cut.py): a wrapper holds dpkg at the start of one package's unpack, so that the cut lands
inside it every time rather than wherever a timer happens to fall.

The tests share one host and run in file order; a failed step skips the rest:

1. the owner's ``apt-get install jq``, cut inside jq's unpack: the deploy stops with one line naming jq and
   the fix, before any change (packages and /etc compared); the fix, as the line gives it, works;
2. rigforge's own install of the base packages, cut inside the unpack of python3-distutils (a dependency of
   python3-venv), in a run of two rigs: the cut rig gets the one lost-connection line and no traceback, the
   other rig finishes the deploy, the run exits non-zero; the same command then finishes python3-distutils
   by itself (one line), converges, and a dry run plans nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rigforge.connection.lost import lost_line
from rigforge.facts.apt_transaction import TRANSACTION_RECORD, AptTransactionRecord, RecordedPackage
from rigforge.facts.dpkg_state import DpkgUnfinished, UnfinishedPackage
from rigforge.operations.dpkg_repair import reinstall_line, repair_line
from rigforge.operations.lock import LOCK_PATH
from rigforge.sandbox import SandboxHost, exec_in
from tests.e2e.conftest import Sandbox
from tests.e2e.power_cut import (
    NOTHING_CHANGED,
    arm_hold,
    held,
    power_cut,
    power_on,
    remove_holds,
    run_and_cut,
    unpack_of,
)
from tests.e2e.pyinfra_run import assert_no_changes, run_pyinfra

DEPLOY = "deploys/host.py"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
OURS = "python3-distutils"  # pulled in by python3-venv, one of the sandbox profile's base packages
OWNERS = "jq"


@dataclass
class Rig:
    sandbox: Sandbox
    host: SandboxHost
    bystander: SandboxHost  # another rig of the same run, never cut
    inventory: Path
    tmp: Path
    done: list[str] = field(default_factory=list)

    def sh(self, command: str) -> str:
        proc = exec_in(self.host, command, timeout=300)
        assert proc.returncode == 0, f"{command}: {proc.stderr}"
        return proc.stdout

    def fact(self, fact: type) -> object:
        return fact().process(self.sh(fact().command()).splitlines())

    def require(self, step: str) -> None:
        if step not in self.done:
            pytest.skip(f"needs the earlier step {step!r}, which did not pass")


@pytest.fixture(scope="module")
def rig(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    tmp = tmp_path_factory.mktemp("powercut")
    host, bystander = sandbox.fresh_host("powercut"), sandbox.fresh_host("bystander")
    yield Rig(sandbox, host, bystander, sandbox.write_inventory(tmp / "inventory.py", [host], "sandbox"), tmp)
    remove_holds(host, "dpkg-deb")


def lines(output: str, name: str) -> list[str]:
    """``name``'s lines of pyinfra's output, without colours or the padding that aligns several hosts' names."""
    return [re.sub(r"^(\[[^]]+\])\s+", r"\1 ", ANSI.sub("", line).strip())
            for line in output.splitlines() if f"[{name}]" in line]


def test_an_owners_package_cut_in_its_unpack_stops_the_deploy_with_the_fix(rig: Rig) -> None:
    arm_hold(rig.host, "dpkg-deb", unpack_of(OWNERS))
    rig.sh(f"nohup sh -c 'apt-get update -qq && apt-get install -y -qq {OWNERS}' >/root/owner-apt.log 2>&1 &")
    rig.sh("for i in $(seq 600); do [ -s /run/rigforge-hold/dpkg-deb.held ] && exit 0; sleep 0.2; done; exit 1")
    power_cut(rig.host)
    power_on(rig.host, rig.sandbox.state)
    found = rig.fact(DpkgUnfinished)
    assert UnfinishedPackage(OWNERS, "half-installed", True) in found.packages  # type: ignore[attr-defined]
    before = rig.sh(NOTHING_CHANGED)

    result = run_pyinfra(rig.inventory, DEPLOY, check=False)
    output = result.stdout + result.stderr
    said = [line for line in lines(output, rig.host.name) if "dpkg left" in line]
    print("\n".join(said))  # with -s: the docs quote it
    assert result.returncode != 0
    assert said == [f"[{rig.host.name}] {reinstall_line(found)}"], output[-4000:]  # type: ignore[arg-type]
    assert f"fix: dpkg --configure -a, then apt-get install --reinstall {OWNERS} " in said[0]
    assert rig.sh(NOTHING_CHANGED) == before, "the refused run changed the host"
    assert "Traceback" not in output

    # The fix the line gives, as the owner would type it.
    rig.sh(f"dpkg --configure -a && apt-get install -y -qq --reinstall {OWNERS}")
    assert rig.sh(f"dpkg-query -W -f='${{db:Status-Abbrev}}' {OWNERS}").strip() == "ii"
    rig.done.append("owner")


def test_rigforges_own_install_cut_in_an_unpack_is_finished_by_the_same_command(rig: Rig) -> None:
    rig.require("owner")
    arm_hold(rig.host, "dpkg-deb", unpack_of(OURS))
    both = rig.sandbox.write_inventory(rig.tmp / "both.py", [rig.host, rig.bystander], "sandbox")
    cut = run_and_cut(both, DEPLOY, rig.tmp / "cut.log", lambda: bool(held(rig.host, "dpkg-deb")),
                      lambda: power_cut(rig.host))
    output = cut.stderr
    lost = [line for line in lines(output, rig.host.name) if "connection lost" in line]
    print("\n".join(lost))  # with -s: the docs quote it
    assert cut.returncode != 0
    assert len(lost) == 1, output[-4000:]
    # The other rig went on to the end of the deploy.
    assert (cut.data or {}).get("results", {}).get("failed_hosts") == [rig.host.name], output[-4000:]
    assert exec_in(rig.bystander, f"test -e {LOCK_PATH}").returncode != 0
    assert "ii " in exec_in(rig.bystander, "dpkg-query -W -f='${db:Status-Abbrev}' python3-venv").stdout
    prefix = f"[{rig.host.name}] " + lost_line("Host layer | Base | Install base packages", 0).split(" after ")[0]
    assert lost[0].startswith(prefix + " after "), lost[0]
    assert lost[0].endswith("the rig went away (power, network or reboot); run the same deploy again — it resumes")
    assert "Traceback" not in output and "bug report" not in output, output[-4000:]

    power_on(rig.host, rig.sandbox.state)
    found = rig.fact(DpkgUnfinished)
    record = rig.fact(AptTransactionRecord)
    assert UnfinishedPackage(OURS, "half-installed", True) in found.packages  # type: ignore[attr-defined]
    version = rig.sh(f"dpkg-query -W -f='${{Version}}' {OURS}")
    assert record.find(OURS) == RecordedPackage("install", version)  # type: ignore[attr-defined]
    assert rig.sh(f"test -e {LOCK_PATH} && echo left").strip() == "left"  # the cut run could not let go of it

    again = run_pyinfra(rig.inventory, DEPLOY)
    output = again.stdout + again.stderr
    finished = [line for line in lines(output, rig.host.name) if "cut short" in line]
    print("\n".join(finished))  # with -s: the docs quote it
    assert finished == [f"[{rig.host.name}] {repair_line(found, record)}"], output[-4000:]  # type: ignore[arg-type]
    assert finished[0].endswith(f"at the recorded versions (reinstalls {OURS}={version})")
    assert rig.sh(f"dpkg --audit; ls -A /var/lib/dpkg/updates; test ! -e {TRANSACTION_RECORD}") == ""
    assert rig.sh(f"dpkg-query -W -f='${{db:Status-Abbrev}}' {OURS} python3-venv") == "ii ii "
    assert_no_changes(rig.inventory, DEPLOY)
