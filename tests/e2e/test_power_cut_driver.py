"""Power cuts in the host layer's long steps with the 2x-pix profile: the driver's DKMS build, the driver's
unpack, the reboot. After each, the same command converges with no manual step and a dry run plans nothing.

Real here: a Debian 12 host with systemd, apt and dpkg with a signed repository, the pinned and held driver,
rigforge's record of its apt transaction, ``systemctl reboot`` (the container's systemd really restarts) and
the power cut (``docker kill``: the whole host SIGKILLed, started again by the test).
STAND-INS (tests/standins/nvidia_cuda_repo.py, kernels.py), as in test_host_roles.py, because NVIDIA's
repository and GPUs cannot exist here: the repository's packages, DKMS (its "build" of the module for each
kernel happens in nvidia-kernel-open-dkms's postinst, as with the real package), the module and nvidia-smi.
Test machinery (tests/e2e/power_cut.py) holds the step so that the cut lands inside it.

Slow (several host-layer runs and reboots): ``pytest -m slow tests/e2e/test_power_cut_driver.py``. The tests
share one host and run in file order; a failed step skips the rest:

1. driver 590.48.01 on a fresh host, the power cut inside the DKMS build of nvidia-kernel-open-dkms's
   postinst (the package left half-configured): the same command finishes rigforge's transaction, saying so
   (``dpkg --configure -a`` runs the build again), and converges, rebooting once;
2. the upgrade to 595.45.04, cut inside the unpack of nvidia-kernel-open-dkms (half-installed, reinstall
   required; nvidia-open 595 already unpacked waits on it): the same command runs rigforge's recorded
   transaction again, which reinstalls it, saying so, and converges;
3. a kernel parameter changed, the host killed while it reboots for it: the run that was waiting for the
   host finds it back once it is started again; the same command then changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rigforge.connection.lost import lost_line
from rigforge.facts.apt_transaction import AptTransactionRecord
from rigforge.facts.dpkg_state import DpkgUnfinished
from rigforge.operations.dpkg_repair import repair_line
from rigforge.operations.reboot import REBOOTING_MARKER
from rigforge.sandbox import SandboxHost, exec_in
from tests.e2e.conftest import Sandbox
from tests.e2e.power_cut import arm_hold, held, power_cut, power_on, remove_holds, run_and_cut, unpack_of
from tests.e2e.pyinfra_run import PyinfraResult, assert_no_changes, changed_ops, run_pyinfra
from tests.standins.nvidia_cuda_repo import build_repo, serve_in_host

pytestmark = pytest.mark.slow

DEPLOY = "deploys/host.py"
PROFILE = "2x-pix"
OLD_DRIVER, NEW_DRIVER = "590.48.01", "595.45.04"
DKMS_PACKAGE = "nvidia-kernel-open-dkms"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: The stand-in DKMS runs ``depmod KERNEL`` once the module is built, still inside the postinst.
DKMS_DEPMOD = r"^[0-9][^ ]*$"


@dataclass
class Rig:
    sandbox: Sandbox
    host: SandboxHost
    repo: dict
    tmp: Path
    done: list[str] = field(default_factory=list)

    def inventory(self, name: str, driver: str, **changes: object) -> Path:
        overrides = {"driver": {**self.repo["driver"], "version": driver}, **changes}
        return self.sandbox.write_inventory(self.tmp / f"{name}.py", [self.host], PROFILE, overrides)

    def sh(self, command: str) -> str:
        proc = exec_in(self.host, command, timeout=300)
        assert proc.returncode == 0, f"{command}: {proc.stderr}"
        return proc.stdout

    def fact(self, fact: type) -> object:
        return fact().process(self.sh(fact().command()).splitlines())

    def require(self, step: str) -> None:
        if step not in self.done:
            pytest.skip(f"needs the earlier step {step!r}, which did not pass")

    def cut(self, inventory: Path, name: str, ready: Callable[[], bool], power_back: bool = False) -> PyinfraResult:
        """Run the deploy and cut the power once ``ready()``; ``power_back``: power on while the run waits."""

        def cut() -> None:
            power_cut(self.host)
            if power_back:
                power_on(self.host, self.sandbox.state)

        return run_and_cut(inventory, DEPLOY, self.tmp / f"{name}.log", ready, cut)


@pytest.fixture(scope="module")
def rig(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    host = sandbox.fresh_host("cutdriver")
    repo = build_repo(tmp_path_factory.mktemp("standin-repo"))
    serve_in_host(repo, host.container)
    yield Rig(sandbox, host, repo.profile_overrides(OLD_DRIVER), tmp_path_factory.mktemp("cutdriver"))
    remove_holds(host, "dpkg-deb", "depmod")


def host_lines(result: PyinfraResult, name: str, *needles: str) -> list[str]:
    return [re.sub(r"^(\[[^]]+\])\s+", r"\1 ", ANSI.sub("", line).strip())
            for line in result.stderr.splitlines() if f"[{name}]" in line and any(n in line for n in needles)]


def assert_lost_in(result: PyinfraResult, name: str, operation: str) -> None:
    lost = host_lines(result, name, "connection lost")
    print("\n".join(lost))  # with -s: the docs quote it
    assert result.returncode != 0 and len(lost) == 1, result.stderr[-4000:]
    assert lost[0].startswith(f"[{name}] {lost_line(operation, 0).split(' after ')[0]} after "), lost[0]
    assert "Traceback" not in result.stderr


def test_a_cut_in_the_dkms_build_is_finished_by_the_same_command(rig: Rig) -> None:
    inventory = rig.inventory("old", OLD_DRIVER)
    arm_hold(rig.host, "depmod", DKMS_DEPMOD)
    cut = rig.cut(inventory, "dkms", lambda: bool(held(rig.host, "depmod")))
    assert_lost_in(cut, rig.host.name, f"Host layer | NVIDIA driver | Install the NVIDIA open driver {OLD_DRIVER}")
    power_on(rig.host, rig.sandbox.state)
    found, record = rig.fact(DpkgUnfinished), rig.fact(AptTransactionRecord)
    assert (DKMS_PACKAGE, "half-configured") in [(p.name, p.status) for p in found.packages], found  # type: ignore[attr-defined]

    again = run_pyinfra(inventory, DEPLOY)
    said = host_lines(again, rig.host.name, "cut short")
    print("\n".join(said))
    assert said == [f"[{rig.host.name}] {repair_line(found, record)}"], again.stderr[-4000:]  # type: ignore[arg-type]
    assert "rebooted; back after" in again.stderr
    assert f"DRIVER version      : {OLD_DRIVER}" in rig.sh("nvidia-smi --version")
    assert_no_changes(inventory, DEPLOY)
    rig.done.append("dkms")


def test_a_cut_in_the_driver_unpack_is_finished_by_the_same_command(rig: Rig) -> None:
    rig.require("dkms")
    inventory = rig.inventory("new", NEW_DRIVER)
    arm_hold(rig.host, "dpkg-deb", unpack_of(DKMS_PACKAGE))
    cut = rig.cut(inventory, "unpack", lambda: bool(held(rig.host, "dpkg-deb")))
    assert_lost_in(cut, rig.host.name, f"Host layer | NVIDIA driver | Install the NVIDIA open driver {NEW_DRIVER}")
    power_on(rig.host, rig.sandbox.state)
    found, record = rig.fact(DpkgUnfinished), rig.fact(AptTransactionRecord)
    assert (DKMS_PACKAGE, "half-installed") in [(p.name, p.status) for p in found.packages], found  # type: ignore[attr-defined]
    assert record.find(DKMS_PACKAGE).version.startswith(NEW_DRIVER)  # type: ignore[attr-defined]

    again = run_pyinfra(inventory, DEPLOY)
    said = host_lines(again, rig.host.name, "cut short")
    print("\n".join(said))
    assert said == [f"[{rig.host.name}] {repair_line(found, record)}"], again.stderr[-4000:]  # type: ignore[arg-type]
    assert said[0].endswith(f"at the recorded versions (reinstalls {DKMS_PACKAGE}={NEW_DRIVER}-1)")
    assert f"DRIVER version      : {NEW_DRIVER}" in rig.sh("nvidia-smi --version")
    assert rig.sh("dpkg --audit; test ! -e /var/lib/rigforge/apt-transaction") == ""
    assert_no_changes(inventory, DEPLOY)
    rig.done.append("unpack")


def test_a_host_killed_while_it_reboots_is_waited_for_and_the_same_command_changes_nothing(rig: Rig) -> None:
    rig.require("unpack")
    inventory = rig.inventory("params", NEW_DRIVER, boot={"kernel_params": ["iommu=pt"]})

    def rebooting() -> bool:
        return exec_in(rig.host, f"test -e {REBOOTING_MARKER}").returncode == 0

    run = rig.cut(inventory, "reboot", rebooting, power_back=True)
    # The run was waiting for the host to come back: it finds it back after the cut and goes on to the end.
    assert run.returncode == 0, run.stderr[-4000:]
    assert "rebooted; back after" in run.stderr
    again = run_pyinfra(inventory, DEPLOY)
    assert changed_ops(again) == [] and "reboot needed" not in again.stderr
    assert_no_changes(inventory, DEPLOY)
