"""One change of a serving rig measured before and after: the steps a driver update (roles/driver_update.py) and
an engine change (roles/engine_update.py) share.

The starts are sized first (``size_starts``: k a side from the rig's last measured start-to-start spread within
``driver_update.starts_budget_s``, rigforge/updates/sizing.py), and the plan line says k, the minutes and the
resolution. Before the change, k engine starts benched on the old side (``measure_side``: the first the full
bench, the others only the judged cells); after it, as many on the new side; then ``judge_change`` compares one
value per start a side (rigforge/updates/record.py: the speed verdict and its resolution, the record under
``results/<host>/``), makes the record a regression when the after-bench's answers differ from the model's
reference and the baseline's did not (roles/quality.py), logs the report, and on a regression either runs the
caller's way back (``--data on_regression=rollback``) or says the rig stays on the new side and how to go back.
Either way the deploy fails on a regression, naming both sides. ``cannot tell`` fails it too, with the resolution
and the starts that would resolve it (the rig stays on the new side: nothing says it is worse), unless the owner
set ``--data on_cannot_tell=continue``: then it passes, the record saying so.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyinfra import host, logger, state
from pyinfra.api import operation

from rigforge.bench_runs.plan import HOST_CHANGE_FILE, results_root
from rigforge.bench_runs.starts import judged_profile
from rigforge.context import RunSettings
from rigforge.operations.files import managed_file
from rigforge.operations.nested import nested_flow
from rigforge.profile import Profile
from rigforge.updates.record import UpdateRecord, judge_update, last_spread
from rigforge.updates.sizing import StartsPlan, plan_starts
from roles import bench, quality
from roles.service import fresh_start


@dataclass(frozen=True)
class MeasuredChange:
    """What is judged: the kind of change and its two sides.

    + kind: ``driver`` or ``engine`` (the record's and the report's word)
    + before: the old side (a driver version, an engine build's words), None when not known
    + after: the new side
    + rollback: this change is itself a rollback (judged, never rolled back again)
    + stay_words: what the owner can do when a regression stays (no ``on_regression=rollback``)
    """

    kind: str
    before: str | None
    after: str
    rollback: bool = False
    stay_words: str = ""


def size_starts(profile: Profile) -> StartsPlan:
    """k starts a side for this rig's change, from the spread its last measured change measured (or the profile's
    assumed one), read on the controller before anything runs (the dry run says it too)."""
    return plan_starts(profile, last_spread(results_root(), host.name, profile))


def measure_side(profile: Profile, where: str, results: Path, starts: int) -> None:
    """``starts`` engine starts, each restarted, healthy and benched (roles/bench.py): the first the full bench
    (every cell, the quality pass), the others only the judged cells (rigforge/bench_runs/starts.py), the only
    cells a verdict reads more starts of.

    + profile: the profile served on this side (what its results name: the package pin, the image)
    + where: what the operations' names add, e.g. "on driver 595.45.04"
    + results: the controller's results folder
    + starts: k (``size_starts``)
    """
    judged = judged_profile(profile)
    for number in range(1, starts + 1):
        fresh_start(profile, f"start {number} of {starts} {where}")
        cells = "" if number == 1 or judged is profile else " (judged cells)"
        bench.smoke_benchmark(name=f"Bench start {number} of {starts} {where}{cells}",
                              profile=profile if number == 1 else judged, results_dir=str(results))


def change_state(record: UpdateRecord) -> str:
    """What the rig's monitoring reads of its last measured change (``rigforge_measured_change_cannot_tell``)."""
    return json.dumps({"change": record.change, "before": record.driver_before, "after": record.driver_after,
                       "started": record.started, "rollback": record.rollback, "verdict": record.verdict,
                       "undecided": record.undecided, "went_on": record.went_on, "resolution": record.resolution},
                      indent=1) + "\n"


# _set_in_op=False (as pyinfra's python.call): the rollback's operations, called while this one executes,
# must run as nested operations instead of being refused as "called within another operation".
@operation(is_idempotent=False, _set_in_op=False)
def judge_change(profile: Profile, change: MeasuredChange, settings: RunSettings, started: str,
                 baselines: list[str] | None, roll_back: Callable[[], None] | None, starts: int | None = None):
    """
    Compare the starts after the change with those before, keep the verdict on the controller, and fail on a
    regression (first putting the old side back with ``roll_back`` when ``on_regression=rollback``) and on
    "cannot tell" (unless ``on_cannot_tell=continue``).

    + profile: the host's profile (tolerance, workload)
    + change: what is judged
    + settings: the run's switches (``on_regression``)
    + started: the change's stamp; benches from it on belong to this change
    + baselines: reused baseline run folders (one per engine start), None when this change measured its own
    + roll_back: plans (and, nested, executes) the way back; None: there is none
    + starts: k, the starts a side measured (``size_starts``); None: ``bench.verdicts.starts``

    **Example:**

    .. code:: python

        judge_change(name="Compare", profile=p, change=MeasuredChange("driver", "590.48.01", "595.45.04"),
                     settings=s, started="20261123T040000Z", baselines=None, roll_back=None)
    """
    if not state.is_executing:
        host.noop("judged once both sides are benched")
        return
    yield from nested_flow(_judge, profile, change, settings, started, baselines, roll_back, starts)


def _judge(profile: Profile, change: MeasuredChange, settings: RunSettings, started: str,
           baselines: list[str] | None, roll_back: Callable[[], None] | None, starts: int | None) -> bool:
    # Run with the host in context (rigforge/operations/nested.py): the rollback's operations, called from here,
    # execute at once as nested operations.
    record: UpdateRecord = judge_update(results_root(), host.name, profile, change.before, change.after, started,
                                        [Path(run) for run in baselines] if baselines else None, change.rollback,
                                        change.kind, starts, went_on=settings.on_cannot_tell == "continue")
    record = quality.quality_regression(results_root(), record)  # answers that moved are a regression too
    managed_file(name="Keep the verdict for the monitoring", dest=HOST_CHANGE_FILE, content=change_state(record))
    for line in record.report_lines():
        host.log(line, logger.info if record.ok else logger.error)
    if change.rollback:  # back to the side measured before: only a regression fails it
        return not record.regressed
    if record.undecided and not record.regressed:
        if record.went_on:
            host.log_styled(f"cannot tell: {host.name} goes on with {change.kind} {change.after} "
                            f"(on_cannot_tell=continue); {record.resolution}", fg="yellow", log_func=logger.warning)
            return True
        host.log_styled(f"cannot tell: {host.name} stays on {change.kind} {change.after}, not passed: measure again "
                        f"with more starts (driver_update.starts_budget_s), or let it go on with --data "
                        f"on_cannot_tell=continue; {change.stay_words}", fg="red", log_func=logger.error)
        return False
    if record.ok:
        return True
    if settings.on_regression == "rollback" and roll_back is not None and change.before:
        host.log_styled(f"{record.verdict}: rolling {host.name} back to {change.kind} {change.before} "
                        "(on_regression=rollback)", fg="yellow", log_func=logger.warning)
        roll_back()
    else:
        host.log_styled(f"{record.verdict}: {host.name} stays on {change.kind} {change.after}; {change.stay_words}",
                        fg="red", log_func=logger.error)
    return False
