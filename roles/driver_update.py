"""Driver update role: one rig's driver change as a measured, reversible step.

The order, for a rig whose installed or loaded driver is not the target:

k starts a side, sized before anything runs from the rig's last measured start-to-start spread (or the profile's
assumed one) within ``driver_update.starts_budget_s`` (rigforge/updates/sizing.py; the plan line, ``--dry`` too,
says k, the minutes and what k resolves) → baseline: k engine starts, each restarted, healthy and benched (the
first the full bench, the others the judged cells), or as many recent results of distinct starts of the same
workload on the installed driver → drain (the
profile's ``driver_update.drain_command``, then the engine unit stops) → record the installed driver
in ``/etc/rigforge/driver-previous`` (atomically) → the driver role at the target version (and CUDA)
→ the kernel-module check → one reboot → verify (in-process: installed, held and loaded at the
target, persistenced running, no reboot left pending) → engine image and JIT cache (rebuilt only when
an input changed) → the engine unit, healthy → ``undrain_command`` → k engine starts benched with the same
workload → comparison of one value per start a side → verdict, kept on the controller
(``rigforge.updates.record``; the judging, shared with an engine change, in roles/measured_change.py). Engine
restarts need no reboot, so both sides measure the start-to-start spread;
the one difference they cannot measure, boot to boot, the record says. A verdict of "cannot tell" fails the
deploy (and so stops a rollout) with the resolution, unless ``--data on_cannot_tell=continue``.

The steps are ``update_flow``'s, in order, each one pyinfra operation or role: a hook that takes the rig out of
service and back (``drain_command`` / ``undrain_command`` today) sits at its place in that list.

The target is the profile's ``driver.version``, or with ``--data rollback=true`` the version recorded
before the last update. With ``--data on_regression=rollback`` a regression verdict rolls the rig back
in the same run (nested operations, executed at once) and the deploy still fails, naming both.

A rig already on its target plans nothing here: no bench, no drain, no reboot.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import datetime, timezone

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, deploy, operation
from pyinfra.api.host import Host
from pyinfra.api.state import State
from pyinfra.facts.files import FileContents
from pyinfra.operations import server, systemd

from rigforge.bench_runs.plan import results_root, run_stamp
from rigforge.checks.driver_reboot import driver_mismatch
from rigforge.context import RunSettings, current_profile
from rigforge.facts.driver import NvidiaLoadedDriver
from rigforge.facts.kernel import NvidiaModuleKernels
from rigforge.facts.packages import DpkgPackages, NvidiaSmiVersions
from rigforge.operations.driver_takeover import refuse_foreign_driver
from rigforge.operations.files import managed_file
from rigforge.operations.kernel_module import missing_module_lines
from rigforge.operations.nvidia_apt import driver_packages, installed_driver_version
from rigforge.operations.reboot import PENDING_FILE, loaded_driver_version, reboot_if_needed
from rigforge.operations.secure_boot import refuse_untrusted_driver
from rigforge.profile import Profile
from rigforge.profile.loader import ProfileError
from rigforge.serving.engines import UNIT_NAME
from rigforge.updates.record import recent_baselines
from rigforge.updates.sizing import plan_line
from roles import bench, cuda, drain, driver, images, service
from roles.host import remember_reboot_triggers
from roles.measured_change import MeasuredChange, judge_change, measure_side, size_starts

PREVIOUS_FILE = "/etc/rigforge/driver-previous"


@dataclass(frozen=True)
class UpdatePlan:
    """What this run does to the rig's driver, read before anything changes."""

    installed: str | None
    loaded: str | None
    target: str
    rollback: bool

    @property
    def pending(self) -> bool:
        return self.installed != self.target or self.loaded != self.target


def previous_driver() -> str | None:
    """The driver version recorded before the last update on this rig, or None."""
    lines = [line.strip() for line in host.get_fact(FileContents, path=PREVIOUS_FILE) or [] if line.strip()]
    return lines[0] if lines else None


def plan_update(profile: Profile, rollback: bool) -> UpdatePlan:
    """Read the rig's driver and decide the target; a rollback with nothing recorded stops here."""
    assert profile.driver is not None
    installed = installed_driver_version(host.get_fact(DpkgPackages), driver_packages(profile.driver.flavor))
    target = profile.driver.version
    if rollback:
        recorded = previous_driver()
        if recorded is None:
            raise ProfileError(f"--data rollback=true: {host.name} has no {PREVIOUS_FILE} (no driver update by "
                               "rigforge to roll back)")
        target = recorded
    return UpdatePlan(installed, loaded_driver_version(host), target, rollback)


@deploy("Driver update")
def apply_driver_update(settings: RunSettings) -> None:
    """Update (or roll back) the rig's driver, measured before and after; nothing when it is on target."""
    profile = current_profile()
    if profile.driver is None:
        host.log("driver update: the profile installs no NVIDIA driver", logger.info)
        return
    plan = plan_update(profile, settings.rollback)
    say_pending_reboot(plan, settings.allow_reboot)
    if not plan.pending:
        host.log(f"driver update: {plan.target} is installed and loaded; nothing to do", logger.info)
        return
    update_flow(profile, plan, settings)


def say_pending_reboot(plan: UpdatePlan, allow_reboot: bool) -> None:
    """Name a reboot left pending by an earlier update (user space of one driver, the module of another) before
    anything runs: the baseline bench cannot run on such a rig, and the update's one reboot is what fixes it."""
    mismatch = driver_mismatch(host.get_fact(NvidiaLoadedDriver), host.get_fact(NvidiaSmiVersions))
    if mismatch is None:
        return
    then = ("this update reboots into " + plan.target if allow_reboot else
            "reboots are off (allow_reboot=false): run it with --data allow_reboot=true, or reboot the rig first")
    host.log(f"driver update: a reboot is pending: the NVIDIA {mismatch.found}; {then}", logger.warning)


def update_flow(profile: Profile, plan: UpdatePlan, settings: RunSettings, starts: int | None = None) -> None:
    """The operations of one update (or rollback), in order; see the module docstring.

    + starts: k a side; None: sized now (``size_starts``); a rollback keeps its update's k, so the update's
      starts after are its baseline
    """
    assert profile.driver is not None
    started = run_stamp(datetime.now(timezone.utc))
    results = results_root()
    verb = "Roll back" if plan.rollback else "Update"
    # Before the drain: a module Secure Boot rejects would bring the rig back without GPUs.
    refuse_untrusted_driver(name="Refuse a driver Secure Boot would reject")
    refuse_foreign_driver(name="Refuse to install over the owner's driver", profile=profile,
                          allowed=settings.replace_driver)
    # Out of the fleet gateway's rotation before the baseline's engine restarts, back after the starts after passed.
    drain.take_out(profile, "driver update", "the starts after the update are benched and compared",
                   settings.drain_last)
    bench.install_client(profile)
    if starts is None:
        sized = size_starts(profile)
        starts = sized.starts
        host.log("driver update: " + plan_line(profile, sized, "before", "after", "one reboot")
                 + "; a recent baseline of as many distinct starts saves the first half", logger.info)
    baselines = recent_baselines(results, host.name, profile, plan.installed, starts)
    if baselines is None:
        measure_side(profile, f"on driver {plan.installed}", results, starts)
    else:
        host.log(f"driver update: the baseline is {len(baselines)} recent starts: {', '.join(map(str, baselines))}",
                 logger.info)
    hooks = profile.driver_update
    if hooks.drain_command:
        server.shell(name="Take the rig out of service (driver_update.drain_command)",
                     commands=[shlex.join(hooks.drain_command)])
    systemd.service(name=f"Stop {UNIT_NAME} for the driver change", service=UNIT_NAME, running=False)
    if not plan.rollback and plan.installed and plan.installed != plan.target:
        managed_file(name=f"Record the driver before the update ({plan.installed})", dest=PREVIOUS_FILE,
                     content=plan.installed + "\n")
    changes = driver.apply_driver(version=plan.target)
    remember_reboot_triggers(changes.boot_triggers)
    cuda.apply_cuda(refreshed_by=changes.refreshed_by)
    module_built_for_kernel(name=f"Check the NVIDIA {plan.target} module is built for the kernels",
                            version=plan.target)
    reboot_if_needed(name=f"Reboot into driver {plan.target}", triggers=changes.boot_triggers,
                     driver_packages=driver_packages(profile.driver.flavor), allow_reboot=settings.allow_reboot)
    verify_driver(name=f"Verify driver {plan.target} is installed, held and loaded", target=plan.target,
                  packages=driver_packages(profile.driver.flavor), hold=profile.driver.hold)
    images.apply_images()
    service.apply_service(held_out=True)  # out of rotation since the drain above, until the comparison passes
    if hooks.undrain_command:
        server.shell(name="Put the rig back in service (driver_update.undrain_command)",
                     commands=[shlex.join(hooks.undrain_command)])
    measure_side(profile, f"on driver {plan.target}", results, starts)
    back = UpdatePlan(plan.target, plan.target, plan.installed or "", rollback=True)
    judge_change(name=f"{verb}: compare the starts before and after", profile=profile,
                 change=MeasuredChange("driver", plan.installed, plan.target, plan.rollback,
                                       "roll it back with --data rollback=true"),
                 settings=settings, started=started, baselines=[str(run) for run in baselines] if baselines else None,
                 roll_back=lambda: update_flow(profile, back, settings, starts), starts=starts)
    # Only once the starts after passed: a regression or "cannot tell" fails the deploy before this, and the rig
    # stays out of rotation (the drain said so).
    drain.put_back(profile, "the starts after the update passed their comparison")


@operation(is_idempotent=False)
def verify_driver(target: str, packages: tuple[str, ...], hold: bool):
    """
    Check, once the rig is back, that the target driver is installed, held as the profile says, loaded,
    that nvidia-persistenced runs and that no reboot is left pending (the driver verify suite's promises).

    + target: the driver version the rig must run
    + packages: the top-level driver packages
    + hold: whether they must be held

    **Example:**

    .. code:: python

        verify_driver(name="Verify the driver", target="595.45.04", packages=("nvidia-open",), hold=True)
    """
    if not state.is_executing:
        host.noop("verified once the rig is back from its reboot")
        return
    yield FunctionCommand(_verify, (target, tuple(packages), hold), {})


def _verify(state: State, host: Host, target: str, packages: tuple[str, ...], hold: bool) -> bool:
    del state
    failures = driver_failures(host, target, packages, hold)
    for failure in failures:
        host.log_styled(f"verify FAILED: {failure}", fg="red", log_func=logger.error)
    if not failures:
        host.log(f"verify: driver {target} installed, {'held, ' if hold else ''}loaded; persistenced active")
    return not failures


def driver_failures(rig: Host, target: str, packages: tuple[str, ...], hold: bool) -> list[str]:
    """What is wrong with the rig's driver now (empty: nothing)."""
    dpkg = rig.get_fact(DpkgPackages)
    failures = []
    installed = installed_driver_version(dpkg, packages)
    if installed != target:
        failures.append(f"installed driver is {installed}, expected {target}")
    unheld = [name for name in packages if name in dpkg and dpkg[name].held != hold]
    if unheld:
        failures.append(f"{', '.join(unheld)}: hold is not {hold}")
    loaded = loaded_driver_version(rig)
    if loaded != target:
        failures.append(f"loaded driver is {loaded}, expected {target}")
    pending = [line for line in rig.get_fact(FileContents, path=PENDING_FILE) or [] if line.strip()]
    if pending:
        failures.append(f"a reboot is still pending ({'; '.join(pending)})")
    _, output = rig.run_shell_command("systemctl is-active nvidia-persistenced.service")
    if output.stdout.strip() != "active":
        failures.append(f"nvidia-persistenced is {output.stdout.strip() or 'not active'}")
    return failures


@operation(is_idempotent=False)
def module_built_for_kernel(version: str):
    """
    Before the reboot, check that the NVIDIA module at ``version`` is built for the running kernel and the
    one GRUB boots next; stop with the fix when it is not (no reboot into a kernel without GPUs).

    + version: the driver version the rig is about to boot

    **Example:**

    .. code:: python

        module_built_for_kernel(name="Check the NVIDIA module is built", version="595.45.04")
    """
    if not state.is_executing:
        host.noop("checked once the driver is installed")
        return
    yield FunctionCommand(_module_built, (version,), {})


def _module_built(state: State, host: Host, version: str) -> bool:
    del state
    lines = missing_module_lines(host.get_fact(NvidiaModuleKernels), version)
    for line in lines:
        host.log_styled(f"{line}; no reboot", fg="red", log_func=logger.error)
    return not lines
