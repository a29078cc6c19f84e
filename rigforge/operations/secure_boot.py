"""Refuse a driver change, or a reboot, that Secure Boot would turn into a rig without GPUs.

The preflight's ``secure-boot`` row blocks a deploy, but ``--data skip_preflight=true`` goes past
preflight rows; these guards do not: a DKMS module signed by a key the firmware does not trust fails
with "Key was rejected by service" at boot, and the rig comes back without its GPUs. The host layer
stops before its first change, and the reboot step does not reboot a host whose profile installs a
driver while that key is untrusted. Both read the same fact and judge it with the same function as the
preflight row (rigforge/checks/secure_boot.py), so the line they print carries the same fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, operation
from pyinfra.api.host import Host
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_host

from rigforge.checks.model import Check
from rigforge.checks.secure_boot import MODULE_WOULD_NOT_LOAD, judge_secure_boot
from rigforge.facts.secure_boot import SecureBoot

NOTHING_CHANGED = "nothing was changed on this host"


def untrusted_signing(target: Host) -> Check | None:
    """The failed secure-boot row when Secure Boot would reject a module DKMS signs; None when it would load."""
    check = judge_secure_boot(target.get_fact(SecureBoot))
    return check if check.verdict == "fail" and check.blocking else None


def refusal_line(check: Check, refused: str, outcome: str) -> str:
    """`secure boot on; … is not enrolled: the driver change refused (…); nothing was changed …; fix: …`."""
    return f"secure boot {check.found}: {refused} refused ({MODULE_WOULD_NOT_LOAD}); {outcome}; fix: {check.fix}"


def reboot_refusal(target: Host, driver_packages: Sequence[str]) -> str | None:
    """The line that refuses a reboot of a host whose profile installs a driver DKMS would sign untrusted."""
    if not driver_packages:
        return None
    check = untrusted_signing(target)
    return refusal_line(check, "the reboot", "the host was not rebooted") if check else None


def log_refusal(state: Any, host: Host, line: str) -> bool:
    """Print the refusal in red and fail the host (a FunctionCommand)."""
    host.log_styled(line, fg="red", log_func=logger.error)
    return False


@operation()
def refuse_untrusted_driver(driver: bool = True):
    """
    Stop this host, before the host layer changes anything, when Secure Boot would reject the module
    DKMS builds for the profile's driver; goes past ``skip_preflight=true`` on purpose.

    + driver: the profile installs an NVIDIA driver (False: nothing to guard)

    **Example:**

    .. code:: python

        refuse_untrusted_driver(name="Refuse a driver Secure Boot would reject", driver=profile.driver is not None)
    """
    check = untrusted_signing(host) if driver else None
    if check is None:
        host.noop("secure boot: the NVIDIA module DKMS builds can load (off, unsupported, or its key enrolled)")
        return
    if state.current_stage == StateStage.Prepare:
        # A dry run never executes the stop below: count the host as failed now so it still exits non-zero.
        state.failed_hosts.add(ctx_host.get())
    yield FunctionCommand(log_refusal, (refusal_line(check, "the driver change", NOTHING_CHANGED),), {})
