"""Flows that decide their operations while the deploy executes: nested operations, their verdict, and Ctrl-C.

A driver update's rollback and a recipe experiment's trials depend on what the steps before them found, so they
cannot be planned up front. An operation declared with ``_set_in_op=False`` (as pyinfra's own ``python.call``)
yields ``nested_flow(function, ...)``: pyinfra runs ``function`` with the host in context, the operations it
calls execute at once as nested operations, and what ``function`` returns decides the operation's success.

pyinfra answers Ctrl-C by finishing the operation under way and then ending the run; a flow that is one long
operation would run to its end first. ``ctrl_c_pressed()`` lets a flow stop at its next step instead.

Example::

    @operation(is_idempotent=False, _set_in_op=False)
    def try_things(names: list[str]):
        if not state.is_executing:
            host.noop("decided when the deploy executes")
            return
        yield from nested_flow(run_them, names)      # run_them(names) -> bool
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from pyinfra.api import FunctionCommand

_CTRL_C = threading.Event()


def nested_flow(function: Callable[..., bool], *args: Any) -> Iterator[FunctionCommand]:
    """The commands that run ``function(*args)`` with the host in context and fail the operation when it returns
    False (pyinfra ignores the return value of a function run with the host in context: a second command reads it).

    + function: the flow; its operations execute at once, nested
    + args: its arguments
    """
    outcome: dict[str, bool] = {}

    def run() -> None:
        # No (state, host) parameters: pyinfra runs this with the host in context.
        outcome["ok"] = bool(function(*args))

    yield FunctionCommand(run, (), {})
    yield FunctionCommand(_outcome, (outcome,), {})


def _outcome(state: Any, host: Any, outcome: dict[str, bool]) -> bool:
    del state, host
    return outcome.get("ok", False)


def watch_ctrl_c() -> None:
    """Chain a handler before pyinfra's own Ctrl-C handler that only notes the press (once per process)."""
    previous = signal.getsignal(signal.SIGINT)
    if getattr(previous, "rigforge_chained", False):
        return

    def chained(signum: int, frame: Any) -> None:
        _CTRL_C.set()
        if callable(previous):
            previous(signum, frame)

    chained.rigforge_chained = True  # type: ignore[attr-defined]
    signal.signal(signal.SIGINT, chained)


def ctrl_c_pressed() -> bool:
    """Whether Ctrl-C came since ``watch_ctrl_c`` (pyinfra then ends the run once the operation under way returns)."""
    return _CTRL_C.is_set()
