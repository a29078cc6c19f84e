"""Reboot a rig only when it needs one, say why, and come back.

A reboot is needed when (a) a boot-affecting input changed (the GRUB drop-in, an initramfs input such
as a modprobe.d file, the driver package), (b) the running kernel command line lacks a parameter the
profile asks for, or (c) the loaded NVIDIA driver is not the installed one of the profile's packages. A driver
the profile does not install is the owner's: its pending reboot is named (rigforge/checks/driver_reboot.py), never
made. Nothing else reboots, and
a host that needs none plans and runs nothing (no "conditional change" in ``--dry``, unlike
``server.reboot(_if=...)``).

(a) is remembered until the host reboots: ``record_pending_reboot`` appends the reason to
/run/rigforge/reboot-required the moment the input changes. /run is a fresh tmpfs at every boot, so a
run that stopped before its reboot (an error, ``allow_reboot=false``) leaves the reason for the next
run, and the reboot itself clears it - on real hosts and container hosts alike.

(b) reads /proc/cmdline for real. In a container host /proc/cmdline is the machine's kernel's, which
no deploy can change, so there the check is skipped with a printed note; (a) still reboots it.

pyinfra's ``server.reboot`` waits for /proc/uptime to drop, which never happens in a container. Here a
marker is written to /run before the reboot: connected again and the marker gone means rebooted.
Afterwards the reasons are checked again: a driver that still does not load is an error.

A host whose profile installs a driver is never rebooted while Secure Boot would reject the module DKMS
signs (rigforge/operations/secure_boot.py): the operation fails with the fix instead.

With ``allow_reboot=false`` the operation fails with "reboot required because …", so the deploy
exits non-zero and says what to do.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.host import Host
from pyinfra.api.operation import OperationMeta
from pyinfra.api.state import State
from pyinfra.connectors.util import clear_askpass_cache, remove_any_sudo_askpass_file
from pyinfra.facts.files import File, FileContents

from rigforge.facts.driver import NvidiaLoadedDriver
from rigforge.facts.host import KernelCmdline, cmdline_has
from rigforge.facts.packages import BootEnvironment, DpkgPackages, NvidiaSmiVersions
from rigforge.operations.followup import changed_this_run
from rigforge.operations.nvidia_apt import installed_driver_version
from rigforge.operations.secure_boot import log_refusal, reboot_refusal

PENDING_FILE = "/run/rigforge/reboot-required"
REBOOTING_MARKER = "/run/rigforge/rebooting"
RECONNECT_INTERVAL_S = 2.0


def reboot_reasons(pending: Sequence[str], missing_params: Sequence[str], installed_driver: str | None,
                   loaded_driver: str | None, loaded_detail: str | None = None) -> list[str]:
    """Why a reboot is needed (empty: it is not).

    + pending: boot-affecting changes not yet booted into (this run's and earlier runs')
    + missing_params: profile kernel parameters the running command line lacks
    + installed_driver / loaded_driver: NVIDIA driver versions (None: not installed / not loaded)
    + loaded_detail: why no loaded version could be read (nvidia-smi's message)
    """
    reasons = list(dict.fromkeys(f"{what} changed" for what in pending))
    if missing_params:
        reasons.append(f"the running kernel command line lacks {' '.join(missing_params)}")
    if installed_driver and loaded_driver != installed_driver:
        if loaded_driver:
            loaded = f"{loaded_driver} is loaded"
        else:
            loaded = "it is not loaded" + (f" (nvidia-smi: {loaded_detail})" if loaded_detail else "")
        reasons.append(f"NVIDIA driver {installed_driver} is installed but {loaded}")
    return reasons


def loaded_driver(target: Host) -> tuple[str | None, str | None]:
    """(loaded version, why none): /proc/driver/nvidia/version, else ``nvidia-smi --version``'s DRIVER line."""
    loaded = target.get_fact(NvidiaLoadedDriver)
    if loaded is not None:
        return loaded.version, None
    versions = target.get_fact(NvidiaSmiVersions)
    if versions is None:
        return None, "not installed"
    return versions.driver_version, versions.error


def loaded_driver_version(target: Host) -> str | None:
    """The loaded NVIDIA driver's version, or None."""
    return loaded_driver(target)[0]


def missing_kernel_params(target: Host, kernel_params: Sequence[str]) -> list[str]:
    """Profile parameters absent from /proc/cmdline; empty in a container (its cmdline is not its own)."""
    if not kernel_params or target.get_fact(BootEnvironment).container:
        return []
    running = target.get_fact(KernelCmdline)
    return [param for param in kernel_params if not cmdline_has(running, param)]


def current_reasons(target: Host, triggers: Sequence[tuple[OperationMeta, str]], kernel_params: Sequence[str],
                    driver_packages: Sequence[str]) -> list[str]:
    """Read the host (and, while planning, this run's planned changes) and return the reboot reasons."""
    pending = [line for line in target.get_fact(FileContents, path=PENDING_FILE) or [] if line.strip()]
    if not state.is_executing:
        # While planning nothing is recorded yet; while executing the recording ops wrote these.
        pending += [what for trigger, what in triggers if changed_this_run([trigger])]
    installed = installed_driver_version(target.get_fact(DpkgPackages), driver_packages) if driver_packages else None
    loaded, detail = loaded_driver(target) if installed else (None, None)
    return reboot_reasons(pending, missing_kernel_params(target, kernel_params), installed, loaded, detail)


@operation()
def record_pending_reboot(triggers: Sequence[OperationMeta], what: str):
    """
    Remember until the next boot that ``what`` changed, when one of ``triggers`` changed this run.

    + triggers: boot-affecting operations
    + what: the input they change, e.g. ``the GRUB drop-in``

    **Example:**

    .. code:: python

        record_pending_reboot(name="Reboot pending?", triggers=[dropin], what="the kernel parameters")
    """
    if not changed_this_run(triggers):
        host.noop(f"{what}: unchanged")
        return
    yield StringCommand("sh", "-c", shlex.quote(
        f"install -d -m 755 /run/rigforge && printf '%s\\n' {shlex.quote(what)} >> {PENDING_FILE}"))


@operation(is_idempotent=False, idempotent_notice="Reboots only when a reason is found; it then says which.")
def reboot_if_needed(triggers: Sequence[tuple[OperationMeta, str]] = (), kernel_params: Sequence[str] = (),
                     driver_packages: Sequence[str] = (), allow_reboot: bool = True,
                     delay_s: float = 3, timeout_s: float = 900):
    """
    Reboot the host when a boot-affecting input changed and was not booted into yet, a kernel
    parameter is not running, or the loaded NVIDIA driver differs from the installed one; wait until
    it is back and check again.

    + triggers: (operation, what it changes) pairs already recorded by ``record_pending_reboot``
      (used to plan a ``--dry`` run, when nothing is recorded yet)
    + kernel_params: parameters the running kernel command line must contain
    + driver_packages: top-level driver packages whose installed version must be the loaded one
    + allow_reboot: False fails the operation with the reasons instead of rebooting
    + delay_s: seconds before the first reconnect attempt
    + timeout_s: seconds to wait for the host to come back

    **Example:**

    .. code:: python

        reboot_if_needed(name="Reboot if needed", triggers=[(dropin, "the GRUB drop-in")],
                         kernel_params=["iommu=pt"], driver_packages=["nvidia-open"])
    """
    if not state.is_executing and host.get_fact(BootEnvironment).container and kernel_params:
        host.log("container host: /proc/cmdline belongs to the machine's kernel, so the running kernel "
                 "parameters are not checked; boot-affecting changes still reboot", logger.info)
    reasons = current_reasons(host, triggers, kernel_params, driver_packages)
    if not reasons:
        host.noop("no reboot needed")
        return
    because = "; ".join(reasons)
    refusal = reboot_refusal(host, driver_packages)  # never into a driver whose module Secure Boot rejects
    if refusal:
        yield FunctionCommand(log_refusal, (refusal,), {})
        return
    if not allow_reboot:
        yield FunctionCommand(_refuse, (because,), {})
        return
    host.log(f"reboot needed because {because}", logger.warning)
    yield FunctionCommand(_forget_askpass, (), {})
    yield StringCommand("sh", "-c", shlex.quote(f"install -d -m 755 /run/rigforge && : > {REBOOTING_MARKER}"))
    # Detached, so the SSH channel closes before systemd stops sshd.
    yield StringCommand("( sleep 1 && (systemctl reboot || reboot) ) </dev/null >/dev/null 2>&1 &")
    yield FunctionCommand(_wait_until_rebooted, (delay_s, timeout_s), {})
    yield FunctionCommand(_check_after_reboot, (tuple(kernel_params), tuple(driver_packages)), {})


def _forget_askpass(state: State, host: Host) -> None:
    # Remove sudo's askpass helper while the host is still up; the reboot would strand it.
    remove_any_sudo_askpass_file(host)


def _refuse(state: State, host: Host, because: str) -> bool:
    host.log_styled(f"reboot required because {because}; reboots are off (allow_reboot=false): "
                    "reboot the host, then run the deploy again", fg="red", log_func=logger.error)
    return False


def _rebooted(host: Host) -> bool:
    """True when connected and the marker is gone; False while it is there or the connection drops."""
    try:
        return host.get_fact(File, path=REBOOTING_MARKER) is None
    except Exception:  # noqa: BLE001 - the connection may drop while the host goes down
        return False


def _wait_until_rebooted(state: State, host: Host, delay_s: float, timeout_s: float) -> bool:
    started = time.monotonic()
    time.sleep(delay_s)
    clear_askpass_cache(host)
    host.disconnect()
    while time.monotonic() - started < timeout_s:
        host.connect(show_errors=False)
        if host.connected:
            if _rebooted(host):
                # Later operations expect a booted system, not one still starting units.
                host.run_shell_command("systemctl is-system-running --wait >/dev/null 2>&1 || true")
                host.log(f"rebooted; back after {time.monotonic() - started:.0f}s")
                return True
            host.disconnect()
        time.sleep(RECONNECT_INTERVAL_S)
    host.log_styled(f"the host did not come back from the reboot within {timeout_s:.0f}s", fg="red",
                    log_func=logger.error)
    return False


def _check_after_reboot(state: State, host: Host, kernel_params: tuple[str, ...],
                        driver_packages: tuple[str, ...]) -> bool:
    reasons = current_reasons(host, (), kernel_params, driver_packages)
    if reasons:
        host.log_styled(f"still not right after the reboot: {'; '.join(reasons)} "
                        "(check the boot loader configuration and `dkms status`)", fg="red", log_func=logger.error)
        return False
    return True
