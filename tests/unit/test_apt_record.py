"""The record of rigforge's own apt transaction (rigforge/facts/apt_transaction.py, operations/apt_record.py)
and what the next run does with it (the dpkg repair of rigforge/operations/apt_busy.py).

Every input is real output captured on a sandbox host (tests/fixtures/host/power-cut/, made by its
capture.py): ``apt-get -s`` of the base packages' install, the record rigforge wrote on the host before that
install, and dpkg's state after a real power cut inside an unpack (rigforge's own install, the owner's
``apt-get install jq``) or a removal (a purge rigforge recorded). The awk that turns apt's simulation into the
record runs for real here, and so does the record script, with this machine's own apt.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from pyinfra.api import OperationError, State
from pyinfra.api.host import Host
from pyinfra.facts.deb import DebPackages

from rigforge.facts.apt_transaction import (
    TRANSACTION_RECORD,
    AptTransaction,
    AptTransactionRecord,
    RecordedPackage,
    parse_transaction,
)
from rigforge.facts.dpkg_state import DpkgUnfinished, parse_dpkg_state
from rigforge.facts.packages import DpkgPackages, InstalledPackage
from rigforge.operations import apt, nvidia_apt
from rigforge.operations.apt_busy import CONFIGURE_ALL
from rigforge.operations.apt_record import SIMULATION_TO_RECORD, record_script
from rigforge.operations.dpkg_repair import dpkg_repair, reinstall_line, repair_line
from tests.support_apt import commands

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "host" / "power-cut"
FORGET = f"rm -f {TRANSACTION_RECORD}"


def capture(name: str) -> str:
    return (CAPTURES / name).read_text()


def dpkg_left(case: str):  # noqa: ANN201 - DpkgState
    return parse_dpkg_state(capture(f"fact-DpkgUnfinished-{case}.txt"))


def record_of(case: str) -> AptTransaction | None:
    return AptTransactionRecord().process(capture(f"fact-AptTransactionRecord-{case}.txt").splitlines())


def simulated_to_record(simulation: str) -> list[str]:
    """The record lines the record script's awk makes of ``apt-get -s`` output (run with this machine's awk)."""
    done = subprocess.run(["awk", SIMULATION_TO_RECORD], input=simulation, capture_output=True, text=True,
                          check=True)
    return done.stdout.splitlines()


# --- written before: what the record holds ---

def test_the_record_is_what_apt_said_it_would_install_with_versions() -> None:
    written = capture("fact-AptTransactionRecord-rigforge-cut.txt").splitlines()
    assert written[0].startswith("# rigforge: apt transaction under way (removed when it ends); started ")
    # The record the host got before its install is apt's own simulation of that install, line for line.
    assert simulated_to_record(capture("apt-get-s-install.txt")) == written[1:]
    assert "install python3-distutils 3.11.2-3" in written  # a dependency of python3-venv, not asked by name


def test_a_reinstall_records_the_new_version_not_the_installed_one() -> None:
    # ``Inst NAME [INSTALLED] (NEW ...)``: upgrades and reinstalls show both.
    assert simulated_to_record(capture("apt-get-s-reinstall.txt")) == ["install python3-distutils 3.11.2-3"]


def test_removals_are_recorded_with_their_action() -> None:
    lines = simulated_to_record("Purg nvidia-driver [535.261.03-1]\nRemv libfoo1 [1.0-2]\nPurg bare\n")
    assert lines == ["purge nvidia-driver 535.261.03-1", "remove libfoo1 1.0-2", "purge bare -"]


def test_the_record_parses_with_names_as_dpkg_gives_them() -> None:
    record = record_of("rigforge-cut")
    assert record is not None and record.started == "2026-11-25T16:58:36Z"
    assert record.find("libnuma1:amd64") == record.find("libnuma1") == RecordedPackage("install", "2.0.16-1")
    assert record.find("jq") is None
    assert record_of("none") is None and parse_transaction("\n") is None
    assert AptTransactionRecord().command() == f"cat {TRANSACTION_RECORD} 2>/dev/null; true"


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="no apt on this machine")
def test_the_record_script_writes_the_whole_record_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    record = tmp_path / "rigforge" / "apt-transaction"
    arguments = ("install", "-y", "-qq", "--no-install-recommends", "--no-remove", "dpkg")
    script = record_script(arguments, str(record))
    subprocess.run(["sh", "-c", script], check=True, capture_output=True, text=True)
    written = record.read_text().splitlines()
    assert parse_transaction("\n".join(written)).started.endswith("Z")  # type: ignore[union-attr]
    # Whatever this machine's apt would do for it (nothing, or an upgrade of dpkg), as apt says it.
    simulated = subprocess.run(["apt-get", "-s", "-o", "Debug::NoLocking=1", *arguments], capture_output=True,
                               text=True, check=False, env={"LC_ALL": "C", "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"})
    assert written[1:] == simulated_to_record(simulated.stdout)
    assert sorted(path.name for path in record.parent.iterdir()) == ["apt-transaction"]
    # Flushed to disk before it replaces the old record, and the folder after: a power cut finds one or the other.
    steps = script.split("; ")
    assert steps.index(f"sync {record}.new") < steps.index(f"mv -f {record}.new {record}") < steps.index(
        f"sync {record.parent}")


# --- removed after: every transaction of rigforge's is wrapped ---

def test_the_driver_install_is_recorded_before_and_forgotten_after(planning: tuple[State, Host, dict]) -> None:
    state, host, facts = planning
    facts[DpkgPackages] = {"nvidia-open": InstalledPackage("590.48.01-1", held=True)}
    nvidia_apt.install_driver(name="Install the driver", packages=["nvidia-open"], version="595.45.04",
                              if_it_fails="the old driver is gone")
    state.is_executing = True
    (planned,) = commands(state, host)
    record, install, forget = planned[-3:]
    assert "apt-get -s -o Debug::NoLocking=1 install -y -qq --no-install-recommends --no-remove nvidia-open" in record
    assert install.startswith("DEBIAN_FRONTEND=noninteractive apt-get") and "the old driver is gone" in install
    assert forget == FORGET


# --- read after a cut ---

def test_rigforges_own_transaction_cut_short_is_run_again_at_the_recorded_versions() -> None:
    found, record = dpkg_left("rigforge-cut"), record_of("rigforge-cut")
    configure, write, install, forget = (command.get_raw_value() for command in dpkg_repair(found, record, 10))
    assert repair_line(found, record) == (
        "dpkg: rigforge's own apt transaction was cut short (/var/lib/rigforge/apt-transaction, started "
        "2026-11-25T16:58:36Z): libnuma1:amd64 (unpacked), numactl (unpacked), python3-distutils (half-installed, "
        "reinstall required), python3-lib2to3 (unpacked); also left unfinished: libc-bin (triggers-pending) "
        "(and dpkg's journal of an interrupted run); finishing it: dpkg --force-confdef --force-confold "
        "--configure -a, then the same transaction again: apt-get install of its 8 packages at the recorded "
        "versions (reinstalls python3-distutils=3.11.2-3)")
    # What --configure -a cannot finish waits for the transaction run again right after it.
    assert configure.endswith(f"{CONFIGURE_ALL} || true'")
    # The same transaction, recorded again: apt reinstalls the half-installed package (checked on a sandbox host:
    # dpkg's log shows "upgrade python3-distutils:all 3.11.2-3 3.11.2-3") and completes the unpacked ones.
    pins = ("libnuma1=2.0.16-1 numactl=2.0.16-1 python3-lib2to3=3.11.2-3 python3-distutils=3.11.2-3 "
            "python3-pip-whl=23.0.1+dfsg-1 python3-setuptools-whl=66.1.1-1+deb12u2 python3.11-venv=3.11.2-6+deb12u8 "
            "python3-venv=3.11.2-1+b1")
    assert install == ("DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "
                       f"--no-install-recommends --no-remove --allow-downgrades {pins}")
    assert f"--no-remove --allow-downgrades {pins}" in write
    assert forget == FORGET


def test_the_owners_half_installed_package_stops_with_the_fix() -> None:
    found = dpkg_left("owner-cut")
    for record in (None, record_of("rigforge-cut")):  # no record, or one of another transaction
        with pytest.raises(OperationError) as refused:
            dpkg_repair(found, record)
        assert str(refused.value) == reinstall_line(found, record) == (
            "dpkg left jq (half-installed, reinstall required): dpkg --configure -a cannot finish it and it is not "
            "a package rigforge was installing (rigforge reinstalls only its own, recorded in "
            "/var/lib/rigforge/apt-transaction); nothing changed; fix: dpkg --configure -a, then apt-get install "
            "--reinstall jq (or, to remove it: dpkg --remove --force-remove-reinstreq jq), then run again")


def test_without_its_record_rigforges_own_package_is_treated_as_the_owners() -> None:
    with pytest.raises(OperationError, match=r"^dpkg left python3-distutils \(half-installed, reinstall required\)"):
        dpkg_repair(dpkg_left("rigforge-cut"), None)


def test_a_purge_cut_short_is_finished_by_dpkg() -> None:
    found, record = dpkg_left("purge-cut"), record_of("purge-cut")
    assert record is not None and record.find("rigforge-cut-removal") == RecordedPackage("purge", "1.0")
    configure, purge, forget = (command.get_raw_value() for command in dpkg_repair(found, record))
    assert CONFIGURE_ALL in configure
    # apt would only remove a half-installed package, and refuses one marked reinstall-required: dpkg purges it.
    assert purge == "DEBIAN_FRONTEND=noninteractive dpkg --force-remove-reinstreq --purge rigforge-cut-removal"
    assert forget == FORGET
    assert repair_line(found, record).endswith(
        "finishing it: dpkg --force-confdef --force-confold --configure -a, then dpkg --force-remove-reinstreq "
        "--purge rigforge-cut-removal")


def test_the_record_is_read_only_when_dpkg_shows_unfinished_packages(planning: tuple[State, Host, dict]) -> None:
    state, host, facts = planning
    facts[DebPackages] = {"curl": {"7.88.1-10"}}
    apt.packages(name="Converged", packages=["curl"])
    assert facts["read"] == [DebPackages]  # a converged host: neither dpkg's state nor the record
    apt.packages(name="Something to do on a clean dpkg", packages=["numactl"])
    assert facts["read"] == [DebPackages, DebPackages, DpkgUnfinished]


def test_after_a_cut_the_first_install_finishes_rigforges_own_transaction(planning: tuple[State, Host, dict]) -> None:
    state, host, facts = planning
    facts[DpkgUnfinished], facts[AptTransactionRecord] = dpkg_left("rigforge-cut"), record_of("rigforge-cut")
    apt.packages(name="Install base packages", packages=["numactl", "python3-venv"])
    assert facts["read"] == [DebPackages, DpkgUnfinished, AptTransactionRecord]
    state.is_executing = True
    (planned,) = commands(state, host)
    again = [command for command in planned if command.startswith("DEBIAN_FRONTEND") and "distutils=" in command]
    assert len(again) == 1 and "python3-distutils=3.11.2-3" in again[0]
    assert planned[-2].endswith("install -y -qq --no-install-recommends --no-remove numactl python3-venv")
