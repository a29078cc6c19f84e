"""The secure-boot row and the guards' line: off passes, on with DKMS's key enrolled passes, on without it blocks
with the exact fix. Facts are parsed from mokutil 0.6.0's own lines (see test_facts_secure_boot.py)."""

from __future__ import annotations

from dataclasses import replace

from rigforge.checks import blocking_failures, run_checks
from rigforge.checks.secure_boot import check_secure_boot, judge_secure_boot
from rigforge.facts.secure_boot import DKMS_CERT, UBUNTU_CERT, SecureBoot, parse_secure_boot
from rigforge.operations.secure_boot import NOTHING_CHANGED, reboot_refusal, refusal_line
from tests.support_checks import empty_facts, profile
from tests.support_secure_boot import fact_output

CONFIRM = "reboot and, at the console, confirm in shim's MOK manager"


def _status(sb_state: str | None, answer: str | None = None, **kwargs: str):
    keys = {kwargs.pop("cert", DKMS_CERT): answer} if answer is not None else {}
    return parse_secure_boot(fact_output(sb_state, keys, **kwargs))


def test_off_or_unsupported_passes() -> None:
    for status in (_status("SecureBoot disabled"), _status("EFI variables are not supported on this system"),
                   _status(None, efi="none")):
        check = judge_secure_boot(status)
        assert check.verdict == "ok", check.describe()


def test_on_with_the_key_enrolled_passes_and_names_the_certificate() -> None:
    check = judge_secure_boot(_status("SecureBoot enabled", f"{DKMS_CERT} is already enrolled"))
    assert check.verdict == "ok"
    assert check.found.endswith(f"modules will be signed with {DKMS_CERT}")


def test_on_with_the_key_not_enrolled_blocks_with_the_import_command() -> None:
    check = judge_secure_boot(_status("SecureBoot enabled", f"{DKMS_CERT} is not enrolled"))
    assert (check.verdict, check.blocking) == ("fail", True)
    assert check.found == f"on; {DKMS_CERT} is not enrolled"
    assert check.fix.startswith(f"mokutil --import {DKMS_CERT} (it asks for a one-time password); {CONFIRM}")
    assert "\n" not in check.fix


def test_on_without_a_key_makes_one_first_the_distributions_way() -> None:
    debian = judge_secure_boot(_status("SecureBoot enabled"))
    assert debian.blocking and debian.found == f"on; DKMS has no signing key yet ({DKMS_CERT} missing)"
    # What dkms 3.0.10 runs itself at its first signing (it has no generate_mok before 3.1.0).
    assert debian.fix.startswith("openssl req -new -x509 -nodes -days 36500 -subj '/CN=DKMS module signing key' "
                                 "-newkey rsa:2048 -keyout /var/lib/dkms/mok.key -outform DER -out "
                                 f"/var/lib/dkms/mok.pub && mokutil --import {DKMS_CERT}")
    ubuntu = judge_secure_boot(_status("SecureBoot enabled", os_id="ubuntu"))
    assert ubuntu.fix.startswith(f"update-secureboot-policy --new-key && mokutil --import {UBUNTU_CERT}")


def test_pending_blocked_unknown_and_missing_mokutil() -> None:
    pending = judge_secure_boot(_status("SecureBoot enabled", f"{DKMS_CERT} is already in the enrollment request"))
    assert pending.blocking and pending.fix == f"{DKMS_CERT} waits for its enrollment: {CONFIRM} (Enroll MOK, " \
                                               "Continue, Yes, that password); then run the deploy again"
    blocked = judge_secure_boot(_status("SecureBoot enabled", f"{DKMS_CERT} is blocked in dbx"))
    assert blocked.blocking and blocked.fix.startswith("openssl req ")
    unknown = judge_secure_boot(_status("Cannot determine secure boot state."))
    assert (unknown.verdict, unknown.blocking) == ("warn", False)
    no_mokutil = judge_secure_boot(_status(None, efi="1"))
    assert no_mokutil.blocking and no_mokutil.fix.startswith("apt-get install mokutil && openssl req ")


def test_the_row_applies_only_to_profiles_with_a_driver() -> None:
    facts = replace(empty_facts(), secure_boot=_status("SecureBoot enabled", f"{DKMS_CERT} is not enrolled"))
    assert check_secure_boot(profile("sandbox"), facts) is None
    assert check_secure_boot(profile("2x-pix"), replace(facts, secure_boot=None)) is None
    rows = {check.name: check for check in run_checks(profile("2x-pix"), facts)}
    assert rows["secure-boot"].blocking
    assert "secure-boot" in [check.name for check in blocking_failures(rows.values())]


def test_guard_line_is_one_line_with_the_fix() -> None:
    check = judge_secure_boot(_status("SecureBoot enabled", f"{DKMS_CERT} is not enrolled"))
    line = refusal_line(check, "the driver change", NOTHING_CHANGED)
    assert line.startswith(f"secure boot on; {DKMS_CERT} is not enrolled: the driver change refused (")
    assert "Key was rejected by service" in line and "nothing was changed on this host" in line
    assert line.endswith(check.fix) and "\n" not in line


class _Host:
    """Answers the one fact the reboot guard reads (hand-written: the guard's logic, not pyinfra's)."""

    def __init__(self, status) -> None:
        self.status = status

    def get_fact(self, fact: type) -> object:
        assert fact is SecureBoot
        return self.status


def test_reboot_is_refused_only_for_a_driver_the_firmware_would_reject() -> None:
    untrusted = _Host(_status("SecureBoot enabled", f"{DKMS_CERT} is not enrolled"))
    line = reboot_refusal(untrusted, ["nvidia-open"])  # type: ignore[arg-type]
    assert line is not None and ": the reboot refused (" in line and "the host was not rebooted; fix: mokutil" in line
    assert reboot_refusal(untrusted, []) is None  # type: ignore[arg-type]  # a profile without a driver
    enrolled = _Host(_status("SecureBoot enabled", f"{DKMS_CERT} is already enrolled"))
    assert reboot_refusal(enrolled, ["nvidia-open"]) is None  # type: ignore[arg-type]
    assert reboot_refusal(_Host(_status("SecureBoot disabled")), ["nvidia-open"]) is None  # type: ignore[arg-type]


def test_the_takeover_table_shows_secure_boot_and_blocks_the_host_layer_on_it() -> None:
    from rigforge.checks.takeover import blocking_rows, secure_boot_row
    from tests.unit.test_takeover_rows import BARE, RIG, SANDBOX

    not_enrolled = replace(BARE, secure_boot=_status("SecureBoot enabled", f"{DKMS_CERT} is not enrolled"))
    (row,) = secure_boot_row(RIG, not_enrolled)
    assert (row.found, row.source, row.action) == (f"on; {DKMS_CERT} is not enrolled", "mokutil",
                                                   "blocked: no driver change or reboot")
    assert f"fix: mokutil --import {DKMS_CERT}" in row.why and blocking_rows([row], ("host",)) == [row]
    (no_driver,) = secure_boot_row(SANDBOX, not_enrolled)
    assert (no_driver.action, no_driver.blocking) == ("nothing", False)
    (off,) = secure_boot_row(RIG, replace(BARE, secure_boot=_status("SecureBoot disabled")))
    assert (off.found, off.action, off.blocking) == ("disabled (mokutil: SecureBoot disabled)", "nothing", False)
