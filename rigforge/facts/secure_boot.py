"""Secure Boot, and whether the key DKMS signs the NVIDIA module with is enrolled.

With Secure Boot on, the kernel loads only modules signed by a key the firmware (or shim's MOK list)
trusts. DKMS signs what it builds with its own key; a key that is not enrolled gives a module that
fails with "Key was rejected by service" at the next boot, and the rig comes back without GPUs.

Which certificate DKMS signs with (dkms 3.0.10, Debian 12's, ``prepare_signing`` in /usr/sbin/dkms and
https://github.com/dell/dkms/blob/v3.0.10/dkms.in): ``mok_signing_key``/``mok_certificate`` from
/etc/dkms/framework.conf, then /etc/dkms/framework.conf.d/*.conf (the last assignment wins); when no key
is configured, on Ubuntu /var/lib/shim-signed/mok/MOK.priv and MOK.der (made by
``update-secureboot-policy --new-key``), elsewhere /var/lib/dkms/mok.key and mok.pub (made by DKMS itself
with openssl at its first signing). ``dkms generate_mok`` exists only from dkms 3.1.0.

mokutil's answers are read from its text, never its exit status: ``--test-key`` exits 0 for "not enrolled"
and 1 for "already enrolled" up to 0.7.x (Debian 12 and Ubuntu 24.04 ship 0.6.0) and the other way round
since https://github.com/lcp/mokutil/commit/4d2b704 and 9ae73db (2025). The strings (src/mokutil.c):
``SecureBoot enabled``, ``SecureBoot disabled``, ``SecureBoot validation is disabled in shim``,
``Platform is in Setup Mode``, ``Cannot determine secure boot state.``, ``This system doesn't support
Secure Boot``, ``EFI variables are not supported on this system``; for ``--test-key CERT``: ``CERT is
not enrolled``, ``CERT is already enrolled``, ``CERT is already in db``, ``CERT is already in the
enrollment request``, ``CERT is blocked in dbx``, ``CERT is already in the built-in trusted keyring``,
``Failed to open CERT``, ``Not a valid x509 certificate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pyinfra.api import FactBase

from rigforge.reads.parsing import split_sections

FRAMEWORK_FILES = "/etc/dkms/framework.conf /etc/dkms/framework.conf.d/*.conf"
DKMS_KEY, DKMS_CERT = "/var/lib/dkms/mok.key", "/var/lib/dkms/mok.pub"
UBUNTU_KEY, UBUNTU_CERT = "/var/lib/shim-signed/mok/MOK.priv", "/var/lib/shim-signed/mok/MOK.der"
# The UEFI global variable: 4 bytes of attributes, then 1 when Secure Boot is on.
SECURE_BOOT_EFIVAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"

State = Literal["enabled", "disabled", "unsupported", "unknown"]
Enrollment = Literal["enrolled", "not-enrolled", "pending", "blocked", "unreadable", "untested"]

_STATE_LINES: tuple[tuple[str, State], ...] = (
    ("SecureBoot enabled", "enabled"),
    ("SecureBoot disabled", "disabled"),
    ("This system doesn't support Secure Boot", "unsupported"),
    ("EFI variables are not supported on this system", "unsupported"),
)
# "CA of X is already enrolled" and "CA of X is blocked" (mokutil --ca-check) end the same way as X's own lines.
_ENROLLMENT_ENDINGS: tuple[tuple[str, Enrollment], ...] = (
    (" is not enrolled", "not-enrolled"),
    (" is already enrolled", "enrolled"),
    (" is already in db", "enrolled"),
    (" is already in the built-in trusted keyring", "enrolled"),
    (" is already in the enrollment request", "pending"),
    (" is blocked in dbx", "blocked"),
    (" is blocked", "blocked"),
)


@dataclass(frozen=True)
class SecureBootStatus:
    """Secure Boot on this host and DKMS's signing key.

    + state: ``enabled`` (the kernel checks module signatures), ``disabled``, ``unsupported`` (no EFI, or
      firmware without Secure Boot), ``unknown`` (EFI without an answer)
    + detail: where the state came from, e.g. ``mokutil: SecureBoot enabled``
    + mokutil: mokutil is installed (without it enrollment cannot be tested)
    + certificate / signing_key: what DKMS signs modules with (configured, or the distribution's default)
    + certificate_found: that certificate exists
    + enrollment: what ``mokutil --test-key certificate`` said (``untested``: no mokutil or no certificate)
    + enrollment_detail: mokutil's line about it
    + distribution: os-release ID (``debian``, ``ubuntu``), for the command that makes a key
    """

    state: State
    detail: str
    mokutil: bool
    certificate: str
    signing_key: str
    certificate_found: bool
    enrollment: Enrollment
    enrollment_detail: str
    distribution: str

    @property
    def enforced(self) -> bool:
        """True when an untrusted module would not load."""
        return self.state == "enabled"


def _framework_value(text: str, name: str) -> str | None:
    """The last ``name=value`` of the framework files, quotes removed (they are sourced by bash in order)."""
    value = None
    for line in text.splitlines():
        key, sep, rest = line.strip().partition("=")
        if sep and key == name:
            value = rest.split("#", 1)[0].strip().strip("\"'") or None
    return value


def signing_files(framework: str, distribution: str) -> tuple[str, str]:
    """(key, certificate) DKMS 3.0.x signs with, as ``prepare_signing`` decides."""
    key, cert = _framework_value(framework, "mok_signing_key"), _framework_value(framework, "mok_certificate")
    if key is None and distribution == "ubuntu":
        return UBUNTU_KEY, UBUNTU_CERT
    return key or DKMS_KEY, cert or DKMS_CERT


def parse_sb_state(text: str) -> tuple[State, str]:
    """(state, detail) from ``mokutil --sb-state`` (stdout and stderr together)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for wanted, state in _STATE_LINES:
        if wanted in lines:
            if state == "enabled" and "SecureBoot validation is disabled in shim" in lines:
                # shim tells the kernel Secure Boot is off (MokSBStateRT), so signatures are not enforced.
                return "disabled", "mokutil: SecureBoot enabled, validation disabled in shim"
            return state, "mokutil: " + "; ".join(lines)
    return "unknown", "mokutil: " + ("; ".join(lines) or "no answer")


def parse_efivar(text: str) -> tuple[State, str]:
    """(state, detail) without mokutil: the SecureBoot EFI variable's value byte, or whether EFI exists."""
    value = text.strip()
    if value == "none":
        return "unsupported", "no EFI firmware (/sys/firmware/efi absent)"
    if value in ("0", "1"):
        return ("enabled" if value == "1" else "disabled"), f"EFI variable SecureBoot={value} (mokutil missing)"
    return "unknown", "EFI firmware, SecureBoot variable unreadable (mokutil missing)"


def parse_test_key(text: str) -> tuple[Enrollment, str]:
    """(enrollment, mokutil's line) from ``mokutil --test-key CERT``."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        for ending, enrollment in _ENROLLMENT_ENDINGS:
            if line.endswith(ending):
                return enrollment, line
    return "unreadable", "; ".join(lines) or "no answer"


def parse_secure_boot(output: str) -> SecureBootStatus:
    """Parse the sections printed by ``SecureBoot``'s command."""
    sections = split_sections(output)
    distribution = sections.get("os", "").strip().strip("\"'")
    key, cert = signing_files(sections.get("framework", ""), distribution)
    mokutil = "sb-state" in sections
    state, detail = parse_sb_state(sections["sb-state"]) if mokutil else parse_efivar(sections.get("efi", ""))
    tested = sections.get(f"test-key {cert}")
    if tested is None:
        enrollment: Enrollment = "untested"
        enrollment_detail = "mokutil missing" if not mokutil else f"{cert} not found"
    else:
        enrollment, enrollment_detail = parse_test_key(tested)
    return SecureBootStatus(state, detail, mokutil, cert, key, f"found {cert}" in sections,
                            enrollment, enrollment_detail, distribution)


class SecureBoot(FactBase[SecureBootStatus]):
    """
    Returns Secure Boot's state and whether DKMS's signing certificate is enrolled, as a ``SecureBootStatus``.

    .. code:: python

        status = host.get_fact(SecureBoot)
        if status.enforced and status.enrollment != "enrolled":
            ...
    """

    def command(self) -> str:
        configured = (f"$(cat {FRAMEWORK_FILES} 2>/dev/null | sed -n \"s/^[[:space:]]*mok_certificate=//p\" "
                      "| sed \"s/[#].*//; s/[\\\"']//g\")")
        return (
            "echo '## os'; sed -n 's/^ID=//p' /etc/os-release 2>/dev/null; "
            f"echo '## framework'; cat {FRAMEWORK_FILES} 2>/dev/null | grep -E '^[[:space:]]*mok_'; "
            "echo '## efi'; if [ -d /sys/firmware/efi ]; then "
            f"od -An -t u1 -j4 -N1 {SECURE_BOOT_EFIVAR} 2>/dev/null | tr -d ' '; else echo none; fi; "
            "mok=$(command -v mokutil 2>/dev/null); "
            "if [ -n \"$mok\" ]; then echo '## sb-state'; mokutil --sb-state 2>&1; fi; "
            f"for cert in {configured} {UBUNTU_CERT} {DKMS_CERT}; do if [ -f \"$cert\" ]; then "
            "echo \"## found $cert\"; if [ -n \"$mok\" ]; then echo \"## test-key $cert\"; "
            "mokutil --test-key \"$cert\" 2>&1; fi; fi; done; true"
        )

    def process(self, output: list[str]) -> SecureBootStatus:
        return parse_secure_boot("\n".join(output))
