"""Preflight role: judge the host against its profile before anything changes, and stop on what no deploy fixes.

The facts are read while the deploy is prepared (before any operation runs), the checks print as one
table per host, and one operation fails the host when a blocking check fails. Other hosts go on; a
failed host runs no later operation, so ``deploys/full.py`` changes nothing on it. Under ``--dry``
the host is counted as failed too, so a dry run exits non-zero as well.
``--data skip_preflight=true`` prints the same table and lets the deploy continue.
"""

from __future__ import annotations

import json
from typing import Any

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, StringCommand, deploy, operation
from pyinfra.api.command import QuoteString
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_host

from rigforge.checks import Check, blocking_failures, gather_facts, run_checks, summary, table_lines
from rigforge.context import current_profile, run_settings
from rigforge.probe import PROBE_SCRIPT, probe_argv, probe_failures, probe_lines
from rigforge.probe.interconnect import last_json_line
from rigforge.probe.report import probe_shell_command

PROBE_STEP_TIMEOUT_S = 180
PROBE_NAME = "Probe the GPU interconnect (P2P, all-reduce)"
# The supervisor's own bound: its steps, plus start-up slack, for up to 8 GPUs (28 pairs).
PROBE_TIMEOUT_S = PROBE_STEP_TIMEOUT_S * 30


@deploy("Preflight")
def apply_preflight(with_probe: bool = False) -> None:
    """Print the checks table for this host and stop it on a blocking failure (unless skip_preflight).

    + with_probe: also run the GPU interconnect probe (deploys/preflight.py with ``--data probe=true``)
    """
    settings = run_settings()
    checks = run_checks(current_profile(), gather_facts(host.get_fact))
    _log_table(checks)
    blocking = [check.name for check in blocking_failures(checks)]
    if with_probe:  # read-only: before the stop, so a host a deploy would refuse still gets its answer
        probe_interconnect(name=PROBE_NAME, python=settings.probe_python or None)
    stop_on_blocking_checks(name="Stop when a blocking check fails", blocking=blocking,
                            skip=settings.skip_preflight)


def _log_table(checks: list[Check]) -> None:
    host.log(f"preflight against profile {current_profile().name}:", log_func=logger.info)
    for line in table_lines(checks):
        logger.info(f"{host.print_prefix}{line}")
    log_func = logger.error if blocking_failures(checks) else logger.info
    host.log(summary(host.name, checks), log_func=log_func)


@operation()
def stop_on_blocking_checks(blocking: list[str], skip: bool = False, label: str = "preflight",
                            details: list[str] | None = None):
    """
    Fail this host when a blocking preflight check failed; other hosts continue.

    + blocking: names of the failed blocking checks (empty: nothing to stop)
    + skip: report them and continue (``--data skip_preflight=true``)
    + label: what found them, the stop message's first word (``preflight``, ``already there``)
    + details: one line per blocking item, printed above the stop message

    **Example:**

    .. code:: python

        stop_on_blocking_checks(name="Stop when a blocking check fails", blocking=["bar1"])
    """
    if not blocking:
        host.noop("no blocking preflight check failed")
        return
    names = ", ".join(blocking)
    if skip:
        host.noop(f"blocking checks failed ({names}); continuing because skip_preflight=true")
        return
    if state.current_stage == StateStage.Prepare:
        # A dry run never executes the stop below: count the host as failed now so it still exits non-zero.
        state.failed_hosts.add(ctx_host.get())  # the Host itself, not pyinfra's context proxy
    yield FunctionCommand(_stop_host, (names, label, details or []), {})


def _stop_host(state: Any, host: Any, names: str, label: str, details: list[str]) -> bool:
    for line in details:
        host.log_styled(f"{label}: {line}", fg="red", log_func=logger.error)
    host.log_styled(f"{label}: blocking check failed: {names}; nothing was changed on this host "
                    "(fix it, or run with --data skip_preflight=true)", fg="red", log_func=logger.error)
    return False


@operation()
def probe_interconnect(python: str | None = None):
    """
    Upload the interconnect probe and run it in the engine's environment; fail the host if a step
    timed out, crashed or summed wrong.

    + python: interpreter on the rig to run it with (``--data probe_python=...``); default: the engine
      image for container engines, else ``python3``

    **Example:**

    .. code:: python

        probe_interconnect(name="Probe the GPU interconnect", python="/opt/venv/bin/python3")
    """
    yield FunctionCommand(_run_probe, (current_profile(), python), {})


def _run_probe(state: Any, host: Any, profile: Any, python: str | None) -> bool:
    sudo = {"_sudo": bool(host.data.get("_sudo", False))}
    host.log("probe: read-only, so it runs whatever the tables above block (a blocking row stops deploys, "
             "not the probe)", log_func=logger.info)
    made, output = host.run_shell_command(StringCommand("mktemp", "-d", "/tmp/rigforge-probe.XXXXXX"), **sudo)
    if not made:
        host.log_styled("probe: could not create a temporary directory", fg="red", log_func=logger.error)
        return False
    folder = output.stdout.strip()
    script = f"{folder}/{PROBE_SCRIPT.name}"
    try:
        if not host.put_file(str(PROBE_SCRIPT), script, **sudo):
            return False
        command = probe_shell_command(probe_argv(profile, script, python), PROBE_STEP_TIMEOUT_S)
        host.log(f"probe: {command}", log_func=logger.info)
        try:
            _, output = host.run_shell_command(StringCommand(command), _timeout=PROBE_TIMEOUT_S, **sudo)
        except TimeoutError:
            host.log_styled(f"probe: no answer within {PROBE_TIMEOUT_S} s", fg="red", log_func=logger.error)
            return False
    finally:
        host.run_shell_command(StringCommand("rm", "-rf", QuoteString(folder)), **sudo)
    report = last_json_line(output.stdout)
    for line in probe_lines(report or {}) if report else ["the probe printed no report:", *output.stderr_lines[-5:]]:
        logger.info(f"{host.print_prefix}probe: {line}")
    if report is not None:
        logger.info(f"{host.print_prefix}probe report: {json.dumps(report, sort_keys=True)}")
    problems = probe_failures(report)
    if problems:
        host.log_styled(f"probe failed: {'; '.join(problems)}", fg="red", log_func=logger.error)
    return not problems
