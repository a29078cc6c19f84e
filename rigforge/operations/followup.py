"""Follow-up commands that run only when an earlier operation changed something this run.

pyinfra's ``_if=op.did_change`` gate is evaluated only while executing, so ``--dry`` lists every gated
operation as a "conditional change", even on a converged host. These operations decide inside
themselves instead: while planning they ask whether a trigger *will* change, while executing whether
it *did*. A converged host therefore plans nothing and runs nothing; a changed input plans and runs
exactly its follow-up (``apt-get update``, ``sysctl --system``, ``daemon-reload``…).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyinfra import host, logger, state
from pyinfra.api import StringCommand, operation
from pyinfra.api.operation import OperationMeta

from rigforge.facts.packages import BootEnvironment


def changed_this_run(triggers: Sequence[OperationMeta]) -> bool:
    """True when one of ``triggers`` changed: its outcome while executing, its plan while planning."""
    if state.is_executing:
        return any(trigger.is_complete() and trigger.did_change() for trigger in triggers)
    return any(trigger.will_change for trigger in triggers)


@operation()
def follow_up(commands: list[str], triggers: Sequence[OperationMeta], what: str,
              not_in_container: str | None = None, superseded_by: Sequence[OperationMeta] = ()):
    """
    Run ``commands`` only when one of ``triggers`` changed this run.

    + commands: shell commands (fixed text built by the caller, no user values)
    + triggers: the operations whose change makes the commands necessary
    + what: what the commands do, for the no-change message
    + not_in_container: when set, the reason the commands cannot work in a container host; there
      they are skipped and the reason is printed instead
    + superseded_by: operations whose change makes the commands needless this run (a restart that reads what a
      reload would: a SIGHUP that reaches a daemon still starting, before its handler, stops it for good, and
      systemd counts that exit as clean)

    **Example:**

    .. code:: python

        sysctl_file = managed_file(dest="/etc/sysctl.d/90-rigforge.conf", content=text)
        follow_up(name="Apply sysctls", commands=["sysctl --system"], triggers=[sysctl_file],
                  what="apply sysctls", not_in_container="/proc/sys is the machine's and read-only")
    """
    if not changed_this_run(triggers):
        host.noop(f"{what}: inputs unchanged")
        return
    if changed_this_run(superseded_by):
        host.noop(f"{what}: not needed, a restart this run reads the same")
        return
    if not_in_container:
        container = host.get_fact(BootEnvironment).container
        if container:
            host.log(f"{what}: skipped in this {container} container host: {not_in_container}", logger.warning)
            host.noop(f"{what}: not possible in a container host")
            return
    for command in commands:
        yield StringCommand(command)
