"""Promise: after a cut-off apt run, rigforge finishes only what it can stand behind: dpkg's own leftovers with
``dpkg --configure -a``, its own recorded transaction again at the recorded versions, and never the owner's
half-installed package, which stops the host with the fix (rigforge/operations/dpkg_repair.py, the record:
rigforge/facts/apt_transaction.py). dpkg's state and the record after real power cuts on sandbox hosts are
tests/fixtures/host/power-cut/ (capture.py there); the constructed states below vary one thing each.
"""

from __future__ import annotations

import logging
import shlex
from pathlib import Path

import pytest
from pyinfra.api import OperationError, State
from pyinfra.api.host import Host

from rigforge.facts.apt_transaction import AptTransaction, AptTransactionRecord, RecordedPackage, parse_transaction
from rigforge.facts.dpkg_state import DpkgState, UnfinishedPackage, parse_dpkg_state
from rigforge.operations.apt_busy import install_arguments
from rigforge.operations.apt_record import record_command, record_script
from rigforge.operations.dpkg_repair import dpkg_repair, refusal, reinstall_line, repair_line

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "host" / "power-cut"
CONFIGURE = "DEBIAN_FRONTEND=noninteractive dpkg --force-confdef --force-confold --configure -a"
RECORD = "/var/lib/rigforge/apt-transaction"


def raw(commands: list) -> list[str]:
    return [command.get_raw_value() for command in commands]


def said_then_configure(line: str, tolerate: bool) -> str:
    """The first command: say the line, then ``dpkg --configure -a`` (its failure tolerated when a transaction of
    rigforge's own runs again right after and finishes what it waits on)."""
    return "sh -c " + shlex.quote(f"echo {shlex.quote(line)}; {CONFIGURE}{' || true' if tolerate else ''}")


def captured(case: str) -> tuple[DpkgState, AptTransaction | None]:
    found = parse_dpkg_state((CAPTURES / f"fact-DpkgUnfinished-{case}.txt").read_text())
    record_file = CAPTURES / f"fact-AptTransactionRecord-{case}.txt"
    record = AptTransactionRecord().process(record_file.read_text().splitlines()) if record_file.exists() else None
    return found, record


def test_a_purge_of_rigforges_cut_short_is_finished_by_dpkg_and_the_record_forgotten() -> None:
    found, record = captured("purge-cut")
    line = ("dpkg: rigforge's own apt transaction was cut short (/var/lib/rigforge/apt-transaction, started "
            "2026-11-25T16:59:02Z): rigforge-cut-removal (half-installed); finishing it: dpkg --force-confdef "
            "--force-confold --configure -a, then dpkg --force-remove-reinstreq --purge rigforge-cut-removal")
    assert repair_line(found, record) == line
    assert raw(dpkg_repair(found, record, 7)) == [
        said_then_configure(line, tolerate=True),
        "DEBIAN_FRONTEND=noninteractive dpkg --force-remove-reinstreq --purge rigforge-cut-removal",
        f"rm -f {RECORD}"]


def test_rigforges_cut_install_runs_again_at_the_recorded_versions_reinstalling_the_half_installed() -> None:
    found, record = captured("rigforge-cut")
    pins = ("libnuma1=2.0.16-1 numactl=2.0.16-1 python3-lib2to3=3.11.2-3 python3-distutils=3.11.2-3 "
            "python3-pip-whl=23.0.1+dfsg-1 python3-setuptools-whl=66.1.1-1+deb12u2 python3.11-venv=3.11.2-6+deb12u8 "
            "python3-venv=3.11.2-1+b1")
    line = ("dpkg: rigforge's own apt transaction was cut short (/var/lib/rigforge/apt-transaction, started "
            "2026-11-25T16:58:36Z): libnuma1:amd64 (unpacked), numactl (unpacked), python3-distutils "
            "(half-installed, reinstall required), python3-lib2to3 (unpacked); also left unfinished: libc-bin "
            "(triggers-pending) (and dpkg's journal of an interrupted run); finishing it: dpkg --force-confdef "
            "--force-confold --configure -a, then the same transaction again: apt-get install of its 8 packages at "
            "the recorded versions (reinstalls python3-distutils=3.11.2-3)")
    assert repair_line(found, record) == line
    said, record_it, install, forget = raw(dpkg_repair(found, record, 7))
    assert said == said_then_configure(line, tolerate=True)
    assert record_it.startswith("sh -c 'set -e; install -d -m 755 /var/lib/rigforge; simulated=$(LC_ALL=C apt-get -s")
    assert f"--allow-downgrades {pins} 2>/dev/null" in record_it
    assert install == ("DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=420 install -y -qq "
                       f"--no-install-recommends --no-remove --allow-downgrades {pins}")
    assert forget == f"rm -f {RECORD}"


def test_the_owners_half_installed_package_stops_the_host_with_the_fix() -> None:
    found, record = captured("owner-cut")
    refusal = ("dpkg left jq (half-installed, reinstall required): dpkg --configure -a cannot finish it and it is not "
               "a package rigforge was installing (rigforge reinstalls only its own, recorded in "
               "/var/lib/rigforge/apt-transaction); nothing changed; fix: dpkg --configure -a, then apt-get install "
               "--reinstall jq (or, to remove it: dpkg --remove --force-remove-reinstreq jq), then run again")
    assert reinstall_line(found, record) == refusal
    with pytest.raises(OperationError) as stopped:
        dpkg_repair(found, record)
    assert str(stopped.value) == refusal


def test_another_transaction_recorded_does_not_make_the_owners_package_rigforges() -> None:
    found, _ = captured("owner-cut")
    _, theirs = captured("rigforge-cut")
    with pytest.raises(OperationError, match="dpkg left jq"):
        dpkg_repair(found, theirs)


# --- one thing varied at a time --------------------------------------------------------------------------------

def unfinished(name: str, status: str, reinstall: bool = False) -> UnfinishedPackage:
    return UnfinishedPackage(name, status, reinstall)


def test_nothing_left_unfinished_means_nothing_to_do() -> None:
    assert dpkg_repair(DpkgState()) == []
    assert dpkg_repair(DpkgState(), AptTransaction("x", {"curl": RecordedPackage("install", "1")})) == []


def test_dpkgs_own_leftovers_are_configured_and_said_and_a_failure_is_not_hidden() -> None:
    found = DpkgState((unfinished("curl", "unpacked"), unfinished("libc-bin", "triggers-pending")), True)
    line = ("dpkg: curl (unpacked), libc-bin (triggers-pending) left unfinished (and dpkg's journal of an "
            "interrupted run); finishing with dpkg --force-confdef --force-confold --configure -a before installing")
    assert repair_line(found) == line
    assert raw(dpkg_repair(found)) == [said_then_configure(line, tolerate=False)]
    journal = DpkgState((), True)
    assert repair_line(journal) == ("dpkg: an interrupted dpkg run; finishing with dpkg --force-confdef "
                                    "--force-confold --configure -a before installing")
    assert repair_line(DpkgState((unfinished("curl", "unpacked"),))) == (
        "dpkg: curl (unpacked) left unfinished; finishing with dpkg --force-confdef --force-confold --configure -a "
        "before installing")


def test_a_record_that_names_none_of_the_unfinished_packages_changes_nothing() -> None:
    found = DpkgState((unfinished("curl", "unpacked"),))
    other = AptTransaction("2026-11-25T16:00:00Z", {"numactl": RecordedPackage("install", "2")})
    assert repair_line(found, other) == repair_line(found)
    assert raw(dpkg_repair(found, other)) == [said_then_configure(repair_line(found), tolerate=False)]


def test_a_removal_of_rigforges_cut_short_is_finished_with_dpkg_forced_past_the_reinstall_flag() -> None:
    found = DpkgState((unfinished("old-a:amd64", "half-installed", True), unfinished("old-b", "half-installed", True)))
    record = AptTransaction("", {"old-a": RecordedPackage("remove", "1"), "old-b": RecordedPackage("remove", "2")})
    line = repair_line(found, record)
    assert line == ("dpkg: rigforge's own apt transaction was cut short (/var/lib/rigforge/apt-transaction): "
                    "old-a:amd64 (half-installed, reinstall required), old-b (half-installed, reinstall required); "
                    "finishing it: dpkg --force-confdef --force-confold --configure -a, then dpkg "
                    "--force-remove-reinstreq --remove old-a:amd64 old-b")
    assert raw(dpkg_repair(found, record)) == [
        said_then_configure(line, tolerate=True),
        "DEBIAN_FRONTEND=noninteractive dpkg --force-remove-reinstreq --remove old-a:amd64 old-b", f"rm -f {RECORD}"]


def test_one_package_run_again_is_said_as_one_and_a_multiarch_name_is_reinstalled() -> None:
    found = DpkgState((unfinished("libfoo:amd64", "half-installed", True),))
    record = AptTransaction("", {"libfoo": RecordedPackage("install", "1.2")})
    assert repair_line(found, record).endswith(
        "then the same transaction again: apt-get install of its 1 package at the recorded versions (reinstalls "
        "libfoo=1.2)")
    unpacked = DpkgState((unfinished("libfoo:amd64", "unpacked"),))
    assert repair_line(unpacked, record).endswith("apt-get install of its 1 package at the recorded versions")
    said, *_ = raw(dpkg_repair(found, record, 1))
    assert said.endswith("|| true'")


def test_an_owners_package_with_nothing_for_dpkg_to_configure_goes_straight_to_the_reinstall() -> None:
    found = DpkgState((unfinished("jq", "half-installed", True),))
    assert "fix: apt-get install --reinstall jq (or, to remove it: dpkg --remove --force-remove-reinstreq jq)" in \
        reinstall_line(found)
    two = DpkgState((unfinished("jq", "half-installed", True), unfinished("yq", "half-installed", True)))
    assert reinstall_line(two).startswith("dpkg left jq (half-installed, reinstall required), yq (half-installed, "
                                          "reinstall required): ")
    assert "apt-get install --reinstall jq yq (or, to remove it: dpkg --remove --force-remove-reinstreq jq yq)" in \
        reinstall_line(two)
    mine = AptTransaction("", {"yq": RecordedPackage("install", "4")})
    assert reinstall_line(two, mine).startswith("dpkg left jq (half-installed, reinstall required): ")


# --- the record ------------------------------------------------------------------------------------------------

def test_the_record_keeps_each_packages_action_and_version_and_when_it_started() -> None:
    record = parse_transaction("# rigforge: apt transaction under way; started 2026-11-25T16:20:00Z\n"
                               "install libnuma1:amd64 2.0.16-1\n  purge old 1.0  \nremove gone -\nInst bad 1\n"
                               "install too many fields here\n")
    assert record == AptTransaction("2026-11-25T16:20:00Z", {"libnuma1": RecordedPackage("install", "2.0.16-1"),
                                                             "old": RecordedPackage("purge", "1.0"),
                                                             "gone": RecordedPackage("remove", "-")})
    assert record.find("libnuma1:amd64") == record.find("libnuma1") == RecordedPackage("install", "2.0.16-1")
    assert record.find("numactl") is None
    assert parse_transaction("install curl 1\n") == AptTransaction("", {"curl": RecordedPackage("install", "1")})
    assert parse_transaction("# a comment, no start\ninstall curl 1\n").started == ""
    assert parse_transaction("") is None and parse_transaction(" \n\n") is None


def test_a_start_stamp_is_the_last_one_on_the_line() -> None:
    assert parse_transaction("# started by hand; started 2026-11-25T16:20:00Z\ninstall curl 1\n").started == \
        "2026-11-25T16:20:00Z"


def test_the_record_is_written_by_sh_running_the_record_script() -> None:
    arguments = install_arguments("curl=7.88.1-10")
    assert record_command(arguments).get_raw_value() == "sh -c " + shlex.quote(record_script(arguments))


def test_a_refused_host_is_failed_with_its_line_as_an_error_in_a_dry_run_and_when_run(
        planning: tuple[State, Host, dict], caplog: pytest.LogCaptureFixture) -> None:
    state, host, _ = planning
    with caplog.at_level(logging.INFO):
        (command,) = refusal("dpkg left jq: fix it")
    assert host in state.failed_hosts
    assert [(record.levelno, record.getMessage().endswith("dpkg left jq: fix it")) for record in caplog.records] == [
        (logging.ERROR, True)]
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert command.function(state, host, *command.args, **command.kwargs) is False
    assert [record.levelno for record in caplog.records] == [logging.ERROR]


def test_every_step_of_a_longer_finish_is_said_in_order_and_only_the_owners_package_stops_the_host() -> None:
    found = DpkgState((unfinished("old", "half-installed", True), unfinished("liba:amd64", "half-installed", True),
                       unfinished("libb", "half-installed", True)))
    record = AptTransaction("", {"old": RecordedPackage("purge", "1"), "liba": RecordedPackage("install", "2"),
                                 "libb": RecordedPackage("install", "3")})
    assert repair_line(found, record).endswith(
        "finishing it: dpkg --force-confdef --force-confold --configure -a, then dpkg --force-remove-reinstreq "
        "--purge old, then the same transaction again: apt-get install of its 2 packages at the recorded versions "
        "(reinstalls liba=2, libb=3)")
    with_owner = DpkgState((*found.packages, unfinished("jq", "half-installed", True)))
    with pytest.raises(OperationError) as stopped:
        dpkg_repair(with_owner, record)
    assert str(stopped.value).startswith("dpkg left jq (half-installed, reinstall required): ")
