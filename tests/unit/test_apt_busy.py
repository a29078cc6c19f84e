"""apt busy and dpkg unfinished (rigforge/operations/apt_busy.py, dpkg_repair.py, rigforge/facts/dpkg_state.py).

The lock wait is run for real on this machine with ``sh``: a real process holds a real fcntl lock (as
unattended-upgrades does) on files in a temporary folder, read back through the real /proc/locks. The
dpkg parser reads the fact's output captured on a sandbox host (tests/fixtures/host/sandbox-debian12).
The operations are planned through pyinfra's own API on ``@local`` with the facts given.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyinfra.api import OperationError, State
from pyinfra.api.host import Host
from pyinfra.facts.deb import DebPackages

from rigforge.facts.dpkg_state import DpkgState, DpkgUnfinished, UnfinishedPackage, parse_dpkg_state
from rigforge.facts.packages import DpkgPackages, InstalledPackage
from rigforge.operations import apt, nvidia_apt
from rigforge.operations.apt_busy import CONFIGURE_ALL, LiveCommand, lock_wait_script
from rigforge.operations.dpkg_repair import dpkg_repair, reinstall_line, repair_line
from rigforge.profile.loader import ProfileError, load_profile
from tests.support_apt import commands

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "host" / "sandbox-debian12"
HOLDER = "import fcntl, sys, time; f = open(sys.argv[1], 'w'); getattr(fcntl, sys.argv[2])(f, fcntl.LOCK_EX); " \
         "print('held', flush=True); time.sleep(float(sys.argv[3]))"


def fixture(name: str) -> str:
    return (FIXTURES / f"fact-DpkgUnfinished-{name}.txt").read_text()


# --- the setting ---

def test_the_lock_wait_is_a_profile_setting_of_ten_minutes() -> None:
    assert load_profile("sandbox").apt.lock_wait_minutes == 10
    assert load_profile("2x-pix", {"apt": {"lock_wait_minutes": 0.5}}).apt.lock_wait_minutes == 0.5


@pytest.mark.parametrize(("value", "words"), [(-1, "greater than or equal to 0"), ("ten", "valid number"),
                                              (100000, "less than or equal to 1440")])
def test_a_bad_lock_wait_names_the_field(value: object, words: str) -> None:
    with pytest.raises(ProfileError) as caught:
        load_profile("2x-pix", {"apt": {"lock_wait_minutes": value}})
    first = str(caught.value).split(" (+", 1)[0]
    assert ": apt.lock_wait_minutes: " in first and words in first, str(caught.value)


# --- the fact's parser, on real output ---

def test_a_healthy_host_has_nothing_unfinished() -> None:
    found = parse_dpkg_state(fixture("clean"))
    assert found == DpkgState() and not found and not found.needs_configure


def test_a_package_left_unpacked_is_configurable() -> None:
    found = parse_dpkg_state(fixture("unpacked"))
    assert found.packages == (UnfinishedPackage("numactl", "unpacked", False),)
    assert found.needs_configure and not found.needs_reinstall and not found.journal_pending


def test_half_configured_and_half_installed_with_the_journal_of_a_cut_off_run() -> None:
    found = parse_dpkg_state(fixture("interrupted"))
    by_name = {package.name: package for package in found.packages}
    assert by_name["rigforge-postinst-fails"].status == "half-configured"
    assert by_name["rigforge-postinst-fails"].configurable
    assert by_name["rigforge-cut-off"] == UnfinishedPackage("rigforge-cut-off", "half-installed", True)
    assert found.journal_pending
    assert [package.name for package in found.needs_reinstall] == ["rigforge-cut-off"]


def test_journal_scratch_files_are_not_a_journal() -> None:
    assert not parse_dpkg_state("## journal\ntmp.i\n").journal_pending
    assert parse_dpkg_state("## journal\n0000\ntmp.i\n").journal_pending


def test_the_fact_command_keeps_only_unfinished_packages_and_the_journal() -> None:
    command = DpkgUnfinished().command()
    assert "${db:Status-Status}" in command and "/var/lib/dpkg/updates" in command
    assert DpkgUnfinished().process([]) == DpkgState()


# --- what the run says and does about it ---

def test_repair_is_configure_all_keeping_the_owner_configuration() -> None:
    found = parse_dpkg_state(fixture("unpacked"))
    (command,) = dpkg_repair(found)
    assert isinstance(command, LiveCommand)
    assert CONFIGURE_ALL == "dpkg --force-confdef --force-confold --configure -a"
    assert CONFIGURE_ALL in command.get_raw_value()
    assert repair_line(found) == ("dpkg: numactl (unpacked) left unfinished; finishing with "
                                  f"{CONFIGURE_ALL} before installing")
    assert dpkg_repair(DpkgState()) == []
    assert repair_line(DpkgState(journal_pending=True)).startswith("dpkg: an interrupted dpkg run; finishing")


def test_a_package_dpkg_cannot_finish_stops_the_host_with_the_fix() -> None:
    found = parse_dpkg_state(fixture("interrupted"))
    with pytest.raises(OperationError) as raised:
        dpkg_repair(found)
    assert str(raised.value) == reinstall_line(found)
    assert "rigforge-cut-off (half-installed, reinstall required)" in str(raised.value)
    # dpkg's journal is pending: apt refuses any install before dpkg --configure -a (checked on a sandbox host),
    # and it cannot remove a package marked reinstall-required; dpkg can, forced.
    assert str(raised.value).endswith("fix: dpkg --configure -a, then apt-get install --reinstall rigforge-cut-off "
                                      "(or, to remove it: dpkg --remove --force-remove-reinstreq rigforge-cut-off), "
                                      "then run again")


# --- the lock wait, run for real ---

@pytest.fixture
def locks(tmp_path: Path) -> tuple[str, str]:
    frontend, lists = tmp_path / "lock-frontend", tmp_path / "lists-lock"
    frontend.touch()
    lists.touch()
    (tmp_path / "hold.py").write_text(HOLDER)
    return str(frontend), str(lists)


def hold(path: str, seconds: float, how: str = "lockf") -> subprocess.Popen:
    """A process that holds ``path`` locked (``lockf``: fcntl, as apt and unattended-upgrades; ``flock``)."""
    script = str(Path(path).parent / "hold.py")
    holder = subprocess.Popen([sys.executable, script, path, how, str(seconds)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def wait(minutes: float, lock_files: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    script = lock_wait_script(minutes, every_s=1, poll_s=1, lock_files=lock_files)
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60, check=False)


def test_a_free_lock_is_not_waited_for(locks: tuple[str, str]) -> None:
    started = time.monotonic()
    done = wait(10, (*locks, "/nonexistent/lock"))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert time.monotonic() - started < 2


def test_the_wait_names_the_holder_and_goes_on_once_it_is_gone(locks: tuple[str, str]) -> None:
    holder = hold(locks[1], 3)
    done = wait(10, locks)
    holder.wait()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    command_line = f"{sys.executable} {Path(locks[1]).parent / 'hold.py'} {locks[1]} lockf 3"
    who = f"pid {holder.pid} ({command_line[:160].rstrip()})"  # long command lines are cut at 160 characters
    first = f"apt is busy: {who} holds {locks[1]}; waited 0 s of at most 600 s (apt.lock_wait_minutes)"
    assert re.sub(r"waited [01] s", "waited 0 s", lines[0]) == first  # date +%s may turn a second meanwhile
    assert len(lines) >= 3, "one line per second (every_s=1) while held"
    assert re.fullmatch(r"apt's lock is free after [2-9] s", lines[-1])


def test_past_the_bound_one_line_names_the_holder_and_the_setting(locks: tuple[str, str]) -> None:
    holder = hold(locks[0], 30)
    try:
        done = wait(0.05, locks)
        assert holder.poll() is None, "the holder must never be stopped"
    finally:
        holder.kill()
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert re.fullmatch(rf"apt is busy: pid {holder.pid} \(.+\) holds {re.escape(locks[0])}; gave up after [3-5] s "
                        r"\(apt.lock_wait_minutes: 0.05\); nothing was stopped: run again once it is done, "
                        r"or raise apt.lock_wait_minutes", line), line


def test_an_flock_does_not_stop_apt_and_is_not_waited_for(locks: tuple[str, str]) -> None:
    holder = hold(locks[0], 30, how="flock")
    try:
        done = wait(0.05, locks)
    finally:
        holder.kill()
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


# --- the operations, planned ---

def test_a_converged_host_plans_nothing_and_reads_no_dpkg_state(planning: tuple[State, Host, dict]) -> None:
    state, host, facts = planning
    facts[DebPackages] = {"curl": {"7.88.1-10"}}
    apt.packages(name="Install curl", packages=["curl"])
    assert commands(state, host) == [[]]
    assert DpkgUnfinished not in facts["read"]


def test_an_install_waits_repairs_once_then_installs(planning: tuple[State, Host, dict],
                                                    caplog: pytest.LogCaptureFixture) -> None:
    state, host, facts = planning
    facts[DpkgUnfinished] = parse_dpkg_state(fixture("unpacked"))
    with caplog.at_level("INFO"):
        apt.packages(name="Install numactl", packages=["numactl"])
        apt.packages(name="Install curl", packages=["curl"])
    # Planning (what --dry runs: each operation up to its first command) already says it.
    assert [record.getMessage() for record in caplog.records if "dpkg:" in record.getMessage()] == [
        f"[@local] {repair_line(facts[DpkgUnfinished])}"]
    state.is_executing = True
    first, second = commands(state, host)
    assert first[0].startswith("sh -c ") and "/proc/locks" in first[0]
    assert CONFIGURE_ALL in first[1]
    update, record, install, forget = first[2:]
    assert update == "DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq"
    assert install == ("DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "
                       "--no-install-recommends --no-remove numactl")
    # Recorded on the rig before the transaction, the record removed after it (tests/unit/test_apt_record.py).
    assert "apt-get -s -o Debug::NoLocking=1 install -y -qq --no-install-recommends --no-remove numactl" in record
    assert forget == "rm -f /var/lib/rigforge/apt-transaction"
    assert "/proc/locks" in second[0] and not any(CONFIGURE_ALL in command for command in second)


def test_the_driver_hold_and_unhold_wait_for_the_lock(planning: tuple[State, Host, dict]) -> None:
    state, host, facts = planning
    facts[DpkgPackages] = {"nvidia-open": InstalledPackage("595.45.04-1", held=False)}
    nvidia_apt.hold_at_version(name="Hold the driver", packages=["nvidia-open"], version="595.45.04")
    ((wait, hold),) = commands(state, host)
    assert "/proc/locks" in wait
    assert hold == "apt-mark hold nvidia-open"  # dpkg --set-selections does not wait: the loop before it does
    assert DpkgUnfinished not in facts["read"]  # apt-mark installs nothing: no repair


def test_an_install_over_a_half_installed_package_stops_before_any_change(
        planning: tuple[State, Host, dict], caplog: pytest.LogCaptureFixture) -> None:
    state, host, facts = planning
    facts[DpkgUnfinished] = parse_dpkg_state(fixture("interrupted"))
    with caplog.at_level("INFO"):
        apt.packages(name="Install curl", packages=["curl"])
    line = reinstall_line(facts[DpkgUnfinished])
    # A dry run says it while planning and counts the host as failed; a run stops there, before the lock wait.
    assert [record.getMessage() for record in caplog.records] == [f"[@local] {line}"]
    assert host in state.failed_hosts
    # The first command fails the host; pyinfra then stops the operation: nothing after it runs.
    assert commands(state, host)[0][0] == "callback log_refusal"
