"""Secure Boot: will the NVIDIA module DKMS builds load after the reboot?

With Secure Boot on, DKMS signs the module with its key (rigforge/facts/secure_boot.py says which); a key
the firmware's MOK list does not hold gives "Key was rejected by service" at boot and a rig without GPUs.
Enrolling a key needs a person at the console once (shim's MOK manager asks for the password given to
``mokutil --import``), so no deploy can do it: the row blocks, and the host layer refuses the driver
change and the reboot even with ``skip_preflight=true`` (rigforge/operations/secure_boot.py).
"""

from __future__ import annotations

import shlex

from rigforge.checks.model import Check, HostFacts, advice, failed, ok
from rigforge.facts.secure_boot import SecureBootStatus
from rigforge.profile import Profile

NAME = "secure-boot"
MODULE_WOULD_NOT_LOAD = "the NVIDIA module DKMS signs would not load after the reboot: Key was rejected by service"
EXPECTED = "off, or DKMS's signing key enrolled"
CONFIRM = ("reboot and, at the console, confirm in shim's MOK manager (Enroll MOK, Continue, Yes, that password); "
           "then run the deploy again")


def make_key_command(status: SecureBootStatus) -> str:
    """The distribution's way to make the key DKMS signs with (dkms 3.0.x has no ``generate_mok``)."""
    if status.distribution == "ubuntu" and status.certificate.startswith("/var/lib/shim-signed/"):
        return "update-secureboot-policy --new-key"
    # What dkms 3.0.10's prepare_signing runs itself at its first signing.
    return ("openssl req -new -x509 -nodes -days 36500 -subj '/CN=DKMS module signing key' -newkey rsa:2048 "
            f"-keyout {shlex.quote(status.signing_key)} -outform DER -out {shlex.quote(status.certificate)}")


def enroll_fix(status: SecureBootStatus) -> str:
    """The one-line fix for a key Secure Boot does not trust yet."""
    cert = shlex.quote(status.certificate)
    if status.enrollment == "pending":
        return f"{cert} waits for its enrollment: {CONFIRM}"
    steps = []
    if not status.mokutil:
        steps.append("apt-get install mokutil")
    if not status.certificate_found or status.enrollment == "blocked":
        steps.append(make_key_command(status))
    steps.append(f"mokutil --import {cert} (it asks for a one-time password)")
    return f"{' && '.join(steps)}; {CONFIRM}"


def judge_secure_boot(status: SecureBootStatus) -> Check:
    """The secure-boot row for a host whose profile installs an NVIDIA driver through DKMS."""
    if status.state in ("disabled", "unsupported"):
        return ok(NAME, EXPECTED, f"{status.state} ({status.detail})")
    if status.state == "unknown":
        return advice(NAME, EXPECTED, f"unknown ({status.detail})",
                      "check `mokutil --sb-state` on the rig: with Secure Boot on, DKMS's key must be enrolled")
    cert = status.certificate
    if status.enrollment == "enrolled":
        return ok(NAME, EXPECTED, f"on; {cert} enrolled ({status.enrollment_detail}): modules will be signed with "
                                  f"{cert}")
    if not status.mokutil:
        found = f"on ({status.detail}); enrollment of {cert} cannot be tested"
    elif not status.certificate_found:
        found = f"on; DKMS has no signing key yet ({cert} missing)"
    else:
        found = f"on; {status.enrollment_detail}"
    return failed(NAME, EXPECTED, found, enroll_fix(status), blocking=True)


def check_secure_boot(profile: Profile, facts: HostFacts) -> Check | None:
    """Secure Boot on and DKMS's key not enrolled blocks: the driver's module would not load after the reboot."""
    if profile.driver is None or facts.secure_boot is None:
        return None
    return judge_secure_boot(facts.secure_boot)
