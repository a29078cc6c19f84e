"""Replace the NVIDIA driver the owner installed, only when ``--data replace_driver=true`` asks for it.

The plan is rigforge/checks/driver_takeover.py's, the same the "what is already there" table shows.
Two operations:

- ``refuse_foreign_driver`` stops the host before the host layer changes anything when the driver there
  must be replaced and the switch is off (or cannot be replaced at all). The takeover table already stops
  such a host, but ``skip_preflight=true`` goes past the table; this guard does not.
- ``foreign_driver_removed`` records what it replaces (``REPLACED_RECORD``: the old module stays loaded
  until the reboot, with nothing on disk left to explain it), runs the .run installer's own
  ``nvidia-uninstall --silent``, then ``apt-get purge`` of the foreign packages (recorded on the rig while it
  runs: a purge cut short is finished by the next run); the dry run prints apt's simulation of that purge, every
  package. The driver role installs the profile's driver right after and,
  should that fail, says what state the rig is left in (``recovery_line``).
"""

from __future__ import annotations

import shlex

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, OperationError, StringCommand, operation
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_host

from rigforge.checks.driver_takeover import REFUSE, REPLACE, SWITCH, DriverPlan, plan_driver, read_driver_found
from rigforge.facts.apt_simulation import AptPurgeSimulation
from rigforge.facts.installed import REPLACED_RECORD
from rigforge.operations.apt_busy import apt_get
from rigforge.operations.apt_record import recorded
from rigforge.operations.dpkg_repair import before_apt
from rigforge.operations.secure_boot import NOTHING_CHANGED, log_refusal
from rigforge.profile import Profile


def current_plan(profile: Profile) -> DriverPlan:
    """The driver plan for the current host (its facts come from the deploy's read-ahead)."""
    return plan_driver(profile, read_driver_found(host.get_fact))


def found_text(plan: DriverPlan) -> str:
    """``535.261.03 (proprietary) from the distribution (deb.debian.org/debian bookworm/non-free)``."""
    version = f"{plan.found[0]} ({plan.found[1]})" if plan.found else "the driver"
    return f"{version} from {' and '.join(plan.sources)}"


def refusal(plan: DriverPlan, allowed: bool) -> str | None:
    """The line that stops the host, None when the driver may stay or be replaced (pure)."""
    if plan.action == REFUSE:
        return f"nvidia-driver: {found_text(plan)}: {plan.why}; {NOTHING_CHANGED}"
    if plan.action == REPLACE and not allowed:
        return (f"nvidia-driver: {found_text(plan)} must be replaced ({plan.why}): it would run "
                f"{plan.removal_text()}; allow it with --data {SWITCH}=true; {NOTHING_CHANGED}")
    return None


@operation()
def refuse_foreign_driver(profile: Profile, allowed: bool = False):
    """
    Stop this host before any change when the driver there must be replaced and ``allowed`` is False, or
    cannot be replaced at all; goes past ``skip_preflight=true`` on purpose.

    + profile: the host's profile (its ``driver`` says what is wanted)
    + allowed: ``--data replace_driver=true``

    **Example:**

    .. code:: python

        refuse_foreign_driver(name="Refuse to install over the owner's driver", profile=profile,
                              allowed=settings.replace_driver)
    """
    line = refusal(current_plan(profile), allowed) if profile.driver is not None else None
    if line is None:
        host.noop("driver: nothing the owner installed is in the way")
        return
    if state.current_stage == StateStage.Prepare:
        # A dry run never executes the stop below: count the host as failed now so it still exits non-zero.
        state.failed_hosts.add(ctx_host.get())
    yield FunctionCommand(log_refusal, (line,), {})


def recovery_line(plan: DriverPlan, target: str) -> str:
    """What the rig is left with when the profile's driver fails to install after the removal (pure)."""
    back = (f"apt-get install --no-install-recommends {' '.join(plan.purge)}" if plan.purge else
            f"run the NVIDIA-Linux .run installer of {plan.found[0] if plan.found else 'the old driver'} again")
    return (f"rigforge: the driver that was here ({found_text(plan)}) was removed and NVIDIA {target} did not "
            "install: this rig has no NVIDIA driver on disk now; the old module stays loaded until the next boot, "
            "so do not reboot it yet. Fix the apt error above and run this deploy again (nothing is left to remove: "
            f"it installs {target}), or put the old driver back: {back}")


def recorded_line(plan: DriverPlan) -> str:
    """The line ``REPLACED_RECORD`` keeps: version, a tab, where it came from."""
    return f"{plan.found[0] if plan.found else '?'}\t{' and '.join(plan.sources)}"


@operation()
def foreign_driver_removed(profile: Profile):
    """
    Remove the driver the owner installed, as the profile's plan says: record it, ``nvidia-uninstall
    --silent`` (a .run install), ``apt-get purge`` (the distribution's or the other flavor's packages).
    The host must have passed ``refuse_foreign_driver`` (the switch is on).

    + profile: the host's profile

    **Example:**

    .. code:: python

        foreign_driver_removed(name="Remove the driver the owner installed", profile=profile)
    """
    plan = current_plan(profile) if profile.driver is not None else None
    if plan is None or plan.action != REPLACE:
        host.noop("driver: nothing the owner installed to remove")
        return
    removals = host.get_fact(AptPurgeSimulation, packages=plan.purge) if plan.purge else None
    if removals is not None and removals.errors:
        raise OperationError(f"apt cannot plan the purge of {' '.join(plan.purge)}: {'; '.join(removals.errors)}")
    # Said before the first command: a dry run runs the operation only up to its first command.
    host.log(f"driver: replacing {found_text(plan)}: {plan.removal_text()}", log_func=logger.warning)
    if removals is not None:
        host.log(f"driver: apt would purge {len(removals.removed)} packages (apt-get -s): "
                 f"{', '.join(f'{name} {version}' for name, version in removals.removed)}", log_func=logger.warning)
    record = shlex.quote(recorded_line(plan))
    yield (f"mkdir -p {shlex.quote(REPLACED_RECORD.rsplit('/', 1)[0])} && printf '%s\\n' {record} > "
           f"{REPLACED_RECORD}.tmp && mv {REPLACED_RECORD}.tmp {REPLACED_RECORD}")
    if plan.uninstaller:
        yield StringCommand(plan.uninstaller, "--silent")
    if plan.purge:
        yield from before_apt()
        arguments = ("purge", "-y", "-q", "--allow-change-held-packages", *plan.purge)
        yield from recorded(arguments, apt_get(*arguments, minutes=profile.apt.lock_wait_minutes))
