"""Time bounds for the health-metrics collector: a command that cannot block it, and parts that cannot block each other.

Standard library only: installed beside ``health_metrics.py`` on the rig (``/opt/rigforge/lib/monitoring``).
A wedged GPU can leave ``nvidia-smi`` stuck in the kernel, where even SIGKILL waits: ``subprocess.run``'s timeout
kills it and then waits for it, so the collector would wait too. ``run_bounded`` kills it and walks away, and
``run_parts`` runs each part in a thread of its own, so a part stuck anywhere (a command, a read of a hung mount)
costs its own samples and nothing else:

    results = run_parts({"gpu": (gpu_part, 20.0), "journal": (journal_part, 20.0)})
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple


class Finished(NamedTuple):
    """A command that ended within its bound."""

    returncode: int
    stdout: str
    stderr: str


class PartCut(Exception):
    """A part that ran into a bound of its own (a command that did not answer) but has values all the same.

    + value: what the part returns without the command (its other samples)
    + timed_out: whether a bound cut it (reported as the part's timeout), not another failure
    """

    def __init__(self, message: str, value: Any = None, timed_out: bool = True) -> None:
        super().__init__(message)
        self.value = value
        self.timed_out = timed_out


class PartResult(NamedTuple):
    """What a part returned, or why it did not: ``error`` is None when it finished in time without raising.
    ``value`` may be set beside an error: the values a part cut short still had (``PartCut``)."""

    value: Any
    error: str | None
    timed_out: bool
    seconds: float


def run_bounded(argv: Sequence[str], timeout_s: float) -> Finished | None:
    """Run ``argv``; None when it did not end within ``timeout_s`` (it is killed and not waited for).

    FileNotFoundError when the program does not exist, as ``subprocess.run`` raises it.

    >>> run_bounded(["true"], 5).returncode
    0
    """
    process = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,  # noqa: S603
                               errors="replace")
    try:
        stdout, stderr = process.communicate(timeout=max(timeout_s, 0.01))
    except subprocess.TimeoutExpired:
        process.kill()  # never waited for: a process in uninterruptible sleep would hold the collector with it
        return None
    return Finished(process.returncode, stdout, stderr)


def run_parts(parts: Mapping[str, tuple[Callable[[], Any], float]]) -> dict[str, PartResult]:
    """Run every part at once, each in a daemon thread, and wait for each until its own bound.

    + parts: name -> (the part, seconds it may take)

    A part still running at its bound is left to the thread (reported ``timed_out``); one that raised is
    reported with its exception, so one broken part never stops the others.
    """
    started = time.monotonic()
    results: dict[str, PartResult] = {}
    threads: dict[str, threading.Thread] = {}

    def runner(name: str, part: Callable[[], Any]) -> None:
        begin = time.monotonic()
        cut = False
        try:
            value, error = part(), None
        except PartCut as exc:
            value, error, cut = exc.value, str(exc), exc.timed_out
        except Exception as exc:  # noqa: BLE001 - a part's failure is its metric, never the run's end
            value, error = None, f"{type(exc).__name__}: {exc}"
        results[name] = PartResult(value, error, cut, time.monotonic() - begin)

    for name, (part, _) in parts.items():
        threads[name] = threading.Thread(target=runner, args=(name, part), name=f"part-{name}", daemon=True)
        threads[name].start()
    for name, (_, timeout_s) in parts.items():
        threads[name].join(max(0.0, started + timeout_s - time.monotonic()))
    done = dict(results)  # a thread finishing after its bound changes nothing from here on
    for name, (_, timeout_s) in parts.items():
        if name not in done:
            done[name] = PartResult(None, f"did not finish within {timeout_s:g} s", True, time.monotonic() - started)
    return {name: done[name] for name in parts}
