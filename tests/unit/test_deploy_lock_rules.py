"""The deploy lock's rules, without a host: the record, who may take a held lock over, the refusal line.

The lock on a real host (two deploys at once, dry runs, another controller's lock) is tested in
tests/e2e/test_deploy_lock.py; these are the pure pieces it is built from.
"""

from __future__ import annotations

import os
import subprocess
import sys

from rigforge.operations.lock import (
    LOCK_PATH,
    Holder,
    parse_holder,
    process_alive,
    process_started,
    refusal_line,
    takeover_reason,
    this_run,
)

ME = Holder(controller="ops@desk", machine_id="0123456789ab", pid=100, pid_started="5000",
            deploy="deploys/full.py", since="2026-11-23 04:00:00 UTC")


def test_record_reads_back_and_other_text_is_no_holder() -> None:
    assert parse_holder(ME.record() + "\n") == ME
    assert parse_holder("") is None
    assert parse_holder("not json") is None
    assert parse_holder('{"controller": "x"}') is None


def test_same_controller_takes_over_only_a_dead_run() -> None:
    crashed = Holder(**{**ME.__dict__, "pid": 99})
    assert takeover_reason(crashed, ME, holder_alive=False, break_lock=False) == (
        "its run (pid 99, deploys/full.py) from this controller is gone")
    assert takeover_reason(crashed, ME, holder_alive=True, break_lock=False) is None


def test_another_controller_needs_break_lock() -> None:
    laptop = Holder(**{**ME.__dict__, "controller": "alice@laptop", "machine_id": "ffffffffffff"})
    # Its pid means nothing here: alive or not on this machine, the lock is not ours to judge.
    assert takeover_reason(laptop, ME, holder_alive=False, break_lock=False) is None
    assert takeover_reason(laptop, ME, holder_alive=True, break_lock=True) == "--data break_lock=true"


def test_refusal_is_one_line_naming_holder_and_since() -> None:
    line = refusal_line("rig2x-a", ME)
    assert "\n" not in line
    assert line.startswith("rigforge: rig2x-a is being deployed by ops@desk (pid 100, deploys/full.py) "
                           "since 2026-11-23 04:00:00 UTC; nothing done on it.")
    assert "--data break_lock=true" in line and LOCK_PATH in line


def test_process_liveness_sees_exit_and_pid_reuse() -> None:
    me = os.getpid()
    assert process_alive(me, process_started(me))
    assert not process_alive(me, "1")  # same pid, another start time: a reused pid is not the holder
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not process_alive(child.pid, "")


def test_one_record_per_run() -> None:
    first = this_run("deploys/serve.py")
    assert this_run() is first and first.pid == os.getpid() and first.deploy == "deploys/serve.py"
