"""The SecureBoot fact: mokutil's answers, DKMS's signing files, the EFI variable without mokutil.

Real: the capture from this CI machine (tests/fixtures/secure-boot: real mokutil 0.6.0-2 on a machine
without EFI) and Debian 12's dkms framework.conf. The lines of a Secure Boot machine cannot be captured here;
they are mokutil 0.6.0's own strings, each with its line in src/mokutil.c (tag 0.6.0).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.facts import get_facts

from rigforge.facts.secure_boot import (
    DKMS_CERT,
    DKMS_KEY,
    UBUNTU_CERT,
    UBUNTU_KEY,
    SecureBoot,
    parse_efivar,
    parse_sb_state,
    parse_secure_boot,
    parse_test_key,
    signing_files,
)
from tests.standins import mokutil
from tests.support_secure_boot import fact_output

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "secure-boot"


def test_real_capture_from_a_machine_without_efi() -> None:
    status = SecureBoot().process((FIXTURES / "ci-debian12-bios" / "fact-SecureBoot.txt").read_text().splitlines())
    assert (status.state, status.mokutil, status.enforced) == ("unsupported", True, False)
    assert status.detail == "mokutil: EFI variables are not supported on this system"
    assert (status.certificate, status.signing_key, status.certificate_found) == (DKMS_CERT, DKMS_KEY, False)
    assert status.enrollment == "untested"


def test_captures_come_from_the_current_command() -> None:
    assert (FIXTURES / "command.txt").read_text().rstrip("\n") == SecureBoot().command()


def test_real_capture_from_an_ubuntu_container_without_mokutil() -> None:
    status = SecureBoot().process((FIXTURES / "nvidia-h100-x1" / "fact-SecureBoot.txt").read_text().splitlines())
    assert (status.state, status.mokutil) == ("unsupported", False)
    assert status.detail == "no EFI firmware (/sys/firmware/efi absent)"
    assert (status.distribution, status.certificate, status.signing_key) == ("ubuntu", UBUNTU_CERT, UBUNTU_KEY)
    assert (status.certificate_found, status.enrollment) == (False, "untested")


def test_debian_framework_conf_leaves_dkms_defaults() -> None:
    framework = (FIXTURES / "dkms-3.0.10-8+deb12u1-framework.conf").read_text()
    assert signing_files(framework, "debian") == (DKMS_KEY, DKMS_CERT)
    # dkms 3.0.10's prepare_signing: Ubuntu's default when no key is configured.
    assert signing_files(framework, "ubuntu") == (UBUNTU_KEY, UBUNTU_CERT)


def test_configured_files_win_and_the_last_assignment_counts() -> None:
    framework = ('mok_signing_key="/root/mok/old.key"\nmok_certificate=/root/mok/old.der\n'
                 "mok_signing_key='/root/mok/MOK.key'  # framework.conf.d\nmok_certificate=\"/root/mok/MOK.der\"\n")
    assert signing_files(framework, "debian") == ("/root/mok/MOK.key", "/root/mok/MOK.der")
    assert signing_files(framework, "ubuntu") == ("/root/mok/MOK.key", "/root/mok/MOK.der")


@pytest.mark.parametrize(("text", "state"), [
    ("SecureBoot enabled", "enabled"),                                          # src/mokutil.c:1424
    ("SecureBoot disabled", "disabled"),                                        # :1428
    ("SecureBoot disabled\nPlatform is in Setup Mode", "disabled"),             # :1430
    ("SecureBoot enabled\nSecureBoot validation is disabled in shim", "disabled"),  # :1426
    ("This system doesn't support Secure Boot", "unsupported"),                 # :2116
    ("EFI variables are not supported on this system", "unsupported"),          # :1803
    ("Cannot determine secure boot state.", "unknown"),                         # :1432
    ('Failed to read "SecureBoot" variable: Permission denied', "unknown"),
])
def test_sb_state_lines(text: str, state: str) -> None:
    assert parse_sb_state(text)[0] == state


@pytest.mark.parametrize(("text", "enrollment"), [
    (f"{DKMS_CERT} is not enrolled", "not-enrolled"),                           # src/mokutil.c:1538
    (f"{DKMS_CERT} is already enrolled", "enrolled"),                           # :793
    (f"{DKMS_CERT} is already in db", "enrolled"),                              # :790
    (f"{DKMS_CERT} is already in the built-in trusted keyring", "enrolled"),    # :1520
    (f"CA of {DKMS_CERT} is already enrolled", "enrolled"),                     # :1526
    (f"{DKMS_CERT} is already in the enrollment request", "pending"),           # :796
    (f"{DKMS_CERT} is blocked in dbx", "blocked"),                              # :799
    (f"Failed to open {DKMS_CERT}", "unreadable"),                              # :1504
    ("Not a valid x509 certificate", "unreadable"),                             # :1515
])
def test_test_key_lines(text: str, enrollment: str) -> None:
    assert parse_test_key(text) == (enrollment, text)


def test_enabled_with_the_key_not_enrolled() -> None:
    status = parse_secure_boot(fact_output("SecureBoot enabled", {DKMS_CERT: f"{DKMS_CERT} is not enrolled"}))
    assert (status.state, status.enforced, status.certificate_found, status.enrollment) == (
        "enabled", True, True, "not-enrolled")


def test_only_the_certificate_dkms_uses_is_judged() -> None:
    # An Ubuntu rig with a stray Debian-style key: DKMS signs with shim-signed's MOK, which is missing.
    status = parse_secure_boot(fact_output("SecureBoot enabled", {DKMS_CERT: f"{DKMS_CERT} is already enrolled"},
                                       os_id="ubuntu"))
    assert (status.certificate, status.certificate_found, status.enrollment) == (UBUNTU_CERT, False, "untested")


def test_without_mokutil_the_efi_variable_says() -> None:
    assert parse_efivar("1") == ("enabled", "EFI variable SecureBoot=1 (mokutil missing)")
    assert parse_efivar("0")[0] == "disabled"
    assert parse_efivar("none")[0] == "unsupported"
    assert parse_efivar("")[0] == "unknown"
    status = parse_secure_boot(fact_output(None, {DKMS_CERT: ""}, efi="1"))
    assert (status.state, status.mokutil, status.certificate_found, status.enrollment) == (
        "enabled", False, True, "untested")


@pytest.fixture
def standin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The mokutil stand-in first on PATH, its state folder in tmp_path."""
    binary = tmp_path / "bin" / "mokutil"
    binary.parent.mkdir()
    binary.write_text(mokutil.SCRIPT)
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "state").mkdir()
    monkeypatch.setenv("PATH", f"{binary.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("MOKUTIL_STANDIN_STATE", str(tmp_path / "state"))
    return tmp_path / "state"


def test_fact_command_through_pyinfra_with_the_standin(standin_path: Path) -> None:
    """The fact's own command, the shell and pyinfra's @local connector for real; mokutil is the stand-in."""
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    for sb_state, expected in (("enabled", "enabled"), ("disabled", "disabled"), ("unsupported", "unsupported")):
        (standin_path / "sb-state").write_text(sb_state + "\n")
        (status,) = get_facts(state, SecureBoot).values()
        assert status.state == expected and status.mokutil
        if not Path(DKMS_CERT).exists():
            assert (status.certificate_found, status.enrollment) == (False, "untested")
    assert not state.failed_hosts
