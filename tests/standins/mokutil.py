"""STAND-IN mokutil for sandbox hosts and unit tests: no machine here has Secure Boot (the sandbox hosts are
containers, Docker masks /sys/firmware, and this CI machine boots without EFI, where the real mokutil only
says ``EFI variables are not supported on this system``, tests/fixtures/secure-boot).

It prints what the real mokutil 0.6.0 (Debian 12's and Ubuntu 24.04's) prints, with its exit statuses,
taken from its source (https://github.com/lcp/mokutil, src/mokutil.c at tag 0.6.0): ``--sb-state``
prints ``SecureBoot enabled`` / ``SecureBoot disabled`` (+ ``Platform is in Setup Mode``) and exits 0,
or ``This system doesn't support Secure Boot`` on stderr with 255 (main's ``ret = -1``); ``--test-key
CERT`` prints ``CERT is not enrolled`` and exits 0, or ``CERT is already enrolled`` / ``CERT is already
in the enrollment request`` and exits 1 (0.6.0's order; mokutil after 0.7.2 swaps the two), or
``Failed to open CERT`` on stderr with 255. It does not check that CERT is an X.509 certificate.

What it answers comes from files in its state folder (``MOKUTIL_STANDIN_STATE``, default below):
``sb-state`` (enabled, disabled, setup-mode, unsupported, no-efivars; absent: enabled), ``enrolled`` and
``pending`` (the sha256 of each certificate in the MOK list / in an enrollment request, one a line).
"""

from __future__ import annotations

STATE_DIR = "/var/lib/rigforge-standin/mokutil"
PATH = "/usr/bin/mokutil"

SCRIPT = f"""#!/bin/sh
# STAND-IN for mokutil 0.6.0 (tests/standins/mokutil.py): this host has no EFI firmware.
state="${{MOKUTIL_STANDIN_STATE:-{STATE_DIR}}}"
sb=$(cat "$state/sb-state" 2>/dev/null || echo enabled)
if [ "$sb" = no-efivars ]; then echo "EFI variables are not supported on this system" >&2; exit 1; fi
case "$1" in
  --sb-state)
    case "$sb" in
      enabled) echo "SecureBoot enabled" ;;
      disabled) echo "SecureBoot disabled" ;;
      setup-mode) echo "SecureBoot disabled"; echo "Platform is in Setup Mode" ;;
      *) echo "This system doesn't support Secure Boot" >&2; exit 255 ;;
    esac
    exit 0 ;;
  --test-key|-t)
    cert="$2"
    if ! [ -r "$cert" ]; then echo "Failed to open $cert" >&2; exit 255; fi
    sum=$(sha256sum < "$cert" | cut -d ' ' -f 1)
    if grep -qx "$sum" "$state/enrolled" 2>/dev/null; then echo "$cert is already enrolled"; exit 1; fi
    if grep -qx "$sum" "$state/pending" 2>/dev/null; then echo "$cert is already in the enrollment request"; exit 1; fi
    echo "$cert is not enrolled"; exit 0 ;;
  *) echo "stand-in mokutil: arguments not modelled: $*" >&2; exit 2 ;;
esac
"""


def install_command(sb_state: str = "enabled") -> str:
    """A shell command that installs the stand-in at /usr/bin/mokutil with ``sb_state`` (run as root)."""
    return (f"install -d -m 755 {STATE_DIR} && printf '%s\\n' {sb_state} > {STATE_DIR}/sb-state && "
            f"cat > {PATH} && chmod 755 {PATH}")


def enroll_command(cert: str) -> str:
    """A shell command that puts ``cert`` in the stand-in's MOK list (what confirming at the console does)."""
    return f"sha256sum < {cert} | cut -d ' ' -f 1 >> {STATE_DIR}/enrolled"
