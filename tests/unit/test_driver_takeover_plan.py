"""Replacing the owner's NVIDIA driver: the plan, the table row with and without ``replace_driver=true``, the
refusal and recovery lines, on real captures: Debian 12's own driver 535 installed from the archive's
non-free component on a sandbox host, and apt's simulation of its purge (tests/fixtures/installed/README.md)."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

from pyinfra.api import QuoteString, StringCommand

from rigforge.checks.driver_takeover import (
    INSTALL,
    REFUSE,
    REPLACE,
    RUNFILE,
    UPGRADE,
    DriverFound,
    plan_driver,
)
from rigforge.checks.takeover import InstalledFacts, driver_row
from rigforge.facts.apt_simulation import parse_apt_simulation
from rigforge.facts.driver import parse_driver_version
from rigforge.facts.holders import NO_HOLDERS
from rigforge.facts.installed import NO_CUDA, NO_DRIVER_INSTALL, DriverInstall, RunfileInstall, parse_driver_install
from rigforge.operations.driver_takeover import recorded_line, recovery_line, refusal
from rigforge.operations.nvidia_apt import said_on_failure
from rigforge.profile.loader import load_profile

DEBIAN = Path(__file__).resolve().parents[1] / "fixtures" / "installed" / "debian12-nvidia-535"
RIG = load_profile("2x-pix")  # driver 595.45.04 open from NVIDIA's repository
DEBIAN_INSTALL = parse_driver_install((DEBIAN / "fact-NvidiaDriverInstall.txt").read_text())
DEBIAN_PURGE = parse_apt_simulation((DEBIAN / "fact-AptPurgeSimulation.txt").read_text())
BARE = InstalledFacts(driver_install=NO_DRIVER_INSTALL, loaded_driver=None, smi=None, cuda=NO_CUDA,
                      gpu_processes=NO_HOLDERS, port_listeners=NO_HOLDERS, lock_holders=())
RUNFILE_MODULE = parse_driver_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  "
                                      "Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Sep 18 2025\n")


def found(install: DriverInstall, loaded: object = None) -> DriverFound:
    return DriverFound(install=install, loaded=loaded, smi=None)  # type: ignore[arg-type]


def test_debians_driver_is_every_package_built_from_its_source() -> None:
    # Found by source package (nvidia-graphics-drivers), not only by name: the libraries left behind would be
    # the second set of libraries.
    assert {"libnvidia-ml1", "firmware-nvidia-gsp", "xserver-xorg-video-nvidia", "nvidia-kernel-dkms",
            "nvidia-driver"} <= set(DEBIAN_INSTALL.packages)
    assert len(DEBIAN_INSTALL.packages) == 20
    assert DEBIAN_INSTALL.packages["libnvidia-ml1"].origins[0] == "http://deb.debian.org/debian bookworm/non-free"


def test_debians_driver_is_replaced_by_purging_all_of_it() -> None:
    plan = plan_driver(RIG, found(DEBIAN_INSTALL))
    assert (plan.action, plan.found, plan.uninstaller) == (REPLACE, ("535.261.03", "proprietary"), None)
    assert plan.purge == tuple(sorted(DEBIAN_INSTALL.packages))
    assert plan.removal_text() == "apt-get purge of 20 packages"


def test_apts_own_simulation_is_what_the_row_shows() -> None:
    assert DEBIAN_PURGE.errors == ()
    assert DEBIAN_PURGE.names[:2] == ["nvidia-driver", "nvidia-kernel-dkms"] and len(DEBIAN_PURGE.names) == 20
    assert ("nvidia-kernel-common", "20220217+3~deb12u1") in DEBIAN_PURGE.removed
    facts = replace(BARE, driver_install=DEBIAN_INSTALL, driver_removals=DEBIAN_PURGE)
    (refused,) = driver_row(RIG, facts)
    assert (refused.action, refused.blocking, refused.layer) == ("replace, with --data replace_driver=true", True,
                                                                 "host")
    assert "it would run apt-get purge of 20 packages; apt would purge 20 packages: nvidia-driver, " in refused.why
    assert refused.source.startswith("the distribution (deb.debian.org/debian bookworm): firmware-nvidia-gsp")
    (allowed,) = driver_row(RIG, replace(facts, switches=frozenset({"replace_driver"})))
    assert (allowed.action, allowed.blocking) == ("replace: apt-get purge of 20 packages, then install 595.45.04 "
                                                  "(open)", False)
    assert "xserver-xorg-video-nvidia" in allowed.why


def test_a_simulation_apt_cannot_answer_blocks_even_with_the_switch() -> None:
    broken = parse_apt_simulation("Reading package lists...\nE: Unmet dependencies. Try 'apt --fix-broken install'\n")
    facts = replace(BARE, driver_install=DEBIAN_INSTALL, driver_removals=broken,
                    switches=frozenset({"replace_driver"}))
    (row,) = driver_row(RIG, facts)
    assert (row.action, row.blocking) == ("blocked: apt cannot plan the purge", True)
    assert "Unmet dependencies" in row.why


def test_a_runfile_driver_is_replaced_through_its_own_uninstaller() -> None:
    install = DriverInstall({}, None, RunfileInstall(uninstaller=True, log=True, version="580.95.05"))
    plan = plan_driver(RIG, found(install, RUNFILE_MODULE))
    assert (plan.action, plan.uninstaller, plan.purge) == (REPLACE, "/usr/bin/nvidia-uninstall", ())
    assert plan.removal_text() == "/usr/bin/nvidia-uninstall --silent"
    assert list(plan.sources) == [RUNFILE]


def test_after_the_removal_the_loaded_old_module_does_not_block_the_install() -> None:
    # nvidia-uninstall ran (its log stays), or rigforge recorded the driver it purged; the old module is still
    # loaded until the reboot, with nothing on disk: a run again after a failed install just installs.
    uninstalled = DriverInstall({}, None, RunfileInstall(uninstaller=False, log=True, version="580.95.05"))
    assert plan_driver(RIG, found(uninstalled, RUNFILE_MODULE)).action == INSTALL
    purged = replace(NO_DRIVER_INSTALL, replaced="580.95.05")
    assert plan_driver(RIG, found(purged, RUNFILE_MODULE)).action == INSTALL
    assert plan_driver(RIG, found(NO_DRIVER_INSTALL, RUNFILE_MODULE)).action == REFUSE  # nothing explains it


def test_the_driver_rigforge_installed_is_upgraded_not_replaced() -> None:
    nvidia = parse_driver_install("## policy\nnvidia-open:\n  Installed: 590.48.01-1\n  Version table:\n"
                                  " *** 590.48.01-1 500\n        500 https://developer.download.nvidia.com/compute/"
                                  "cuda/repos/debian12/x86_64  Packages\n## module\n## runfile\n")
    assert plan_driver(RIG, found(nvidia)).action == UPGRADE


def test_refusal_names_what_would_go_and_the_switch() -> None:
    plan = plan_driver(RIG, found(DEBIAN_INSTALL))
    line = refusal(plan, allowed=False)
    assert line is not None and line.startswith("nvidia-driver: 535.261.03 (proprietary) from the distribution "
                                                "(deb.debian.org/debian bookworm) must be replaced")
    assert "it would run apt-get purge of 20 packages; allow it with --data replace_driver=true" in line
    assert line.endswith("nothing was changed on this host")
    assert refusal(plan, allowed=True) is None
    unexplained = plan_driver(RIG, found(NO_DRIVER_INSTALL, RUNFILE_MODULE))
    assert refusal(unexplained, allowed=True) is not None  # no switch can remove what nothing installed


def test_recovery_line_says_the_state_and_both_ways_out() -> None:
    plan = plan_driver(RIG, found(DEBIAN_INSTALL))
    line = recovery_line(plan, "595.45.04")
    assert "this rig has no NVIDIA driver on disk now" in line and "do not reboot it yet" in line
    assert "run this deploy again" in line and "apt-get install --no-install-recommends firmware-nvidia-gsp " in line
    runfile = plan_driver(RIG, found(DriverInstall({}, None, RunfileInstall(True, True, "580.95.05")), RUNFILE_MODULE))
    assert "run the NVIDIA-Linux .run installer of 580.95.05 again" in recovery_line(runfile, "595.45.04")
    assert recorded_line(plan).split("\t")[0] == "535.261.03"
    assert parse_driver_install(f"## replaced\n{recorded_line(plan)}\n").replaced == "535.261.03"


def test_the_recovery_line_follows_a_failed_install_and_nothing_else() -> None:
    def run(command: StringCommand) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", "-c", command.get_raw_value()], capture_output=True, text=True, check=False)

    line = recovery_line(plan_driver(RIG, found(DEBIAN_INSTALL)), "595.45.04")
    apt = StringCommand("sh", "-c", QuoteString("echo 'E: Unable to locate package nvidia-open' >&2; exit 100"))
    failed = run(said_on_failure(apt, line))
    assert failed.returncode == 1
    assert failed.stderr.splitlines() == ["E: Unable to locate package nvidia-open", line]
    passed = run(said_on_failure(StringCommand("echo", "installed"), line))
    assert (passed.returncode, passed.stdout, passed.stderr) == (0, "installed\n", "")
