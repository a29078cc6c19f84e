"""pyinfra's per-operation bookkeeping at a cost that does not grow with the source files on the stack.

pyinfra plans every operation once per host, and for each one it works out the operation's place in the run
from the call stack with ``inspect.stack()`` (pyinfra/api/util.py, ``get_operation_order_from_stack``) and
lists its global arguments with ``typing.get_type_hints`` (pyinfra/api/arguments.py,
``all_global_arguments``). ``inspect.stack()`` reads a line of source for every frame and looks up each
frame's module by scanning ``sys.modules``; on 16 sandbox hosts those two calls were a third of the
controller's time in a no-op ``deploys/host.py`` (cProfile), and the controller's time is what a fleet
costs beyond one host.

Then, for every operation and every fact read, ``pop_global_arguments`` looks each of its ~30 global arguments
up in the host's data: each lookup evaluates every data layer again (override, host, the host's groups merged
into a new dict, inventory, deploy) and raises a KeyError in each layer that lacks the key; that was most of
the rest of a further host's controller time. The wrapper below hands pyinfra's own function a snapshot of
the host's data with the layers evaluated once per call, first layer winning as in ``HostData``.

The replacements give the same answers from the frames alone (a frame's ``co_filename`` and ``f_lineno`` are
what ``inspect.getframeinfo`` reports for code compiled from a file), from the type hints read once and from
the data's layers read once; ``tests/unit/test_planning.py`` compares them with pyinfra's own on real stacks
and real inventories. ``install()`` is called by the deploy lock (rigforge/operations/lock.py), the first
thing every deploy does.
"""

from __future__ import annotations

import importlib
import sys
from copy import copy
from functools import cache
from types import FrameType
from typing import Any

import pyinfra
from pyinfra.api.arguments import AllArguments
from pyinfra.api.host import Host, HostData, extract_callable_datas
from pyinfra.api.state import State
from pyinfra.api.util import PYINFRA_INSTALL_DIR

# The modules themselves: ``pyinfra.api.operation`` as an attribute of ``pyinfra.api`` is the decorator.
pyinfra_arguments = importlib.import_module("pyinfra.api.arguments")
pyinfra_deploy = importlib.import_module("pyinfra.api.deploy")
pyinfra_facts = importlib.import_module("pyinfra.api.facts")
pyinfra_operation = importlib.import_module("pyinfra.api.operation")

_installed = False


def _outer_frames(frame: FrameType | None) -> list[FrameType]:
    """``frame`` and every frame that called it, innermost first (what ``inspect.stack`` walks)."""
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames


def operation_order_from_stack(state: State) -> list[int]:
    """
    The line numbers that order an operation in the run: pyinfra's ``get_operation_order_from_stack``
    without reading source.

    + state: the run's state (its current deploy file and, in the CLI, the file's number)

    **Example:**

    .. code:: python

        order = operation_order_from_stack(state)  # e.g. [0, 31, 88, 52]
    """
    # The caller's frame down: this function's own frame is rigforge's, pyinfra's own is pyinfra's (skipped).
    stack = list(reversed(_outer_frames(sys._getframe(1))))
    start = 0
    if state.current_deploy_filename:
        filenames = [frame.f_code.co_filename for frame in stack]
        # When the deploy file is not on the stack, pyinfra's search ends on its own frame, which it skips.
        found = state.current_deploy_filename in filenames
        start = filenames.index(state.current_deploy_filename) if found else len(stack)
    line_numbers = [state.current_op_file_number] if pyinfra.is_cli else []
    line_numbers.extend(frame.f_lineno for frame in stack[start:]
                        if not frame.f_code.co_filename.startswith(PYINFRA_INSTALL_DIR))
    return line_numbers


@cache
def _global_arguments() -> tuple[tuple[str, type], ...]:
    return tuple(_PYINFRA_ALL_GLOBAL_ARGUMENTS())


def all_global_arguments() -> list[tuple[str, type]]:
    """pyinfra's global arguments and their types, read from its type hints once per process (they are
    declared once, on classes)."""
    return list(_global_arguments())


_PYINFRA_ALL_GLOBAL_ARGUMENTS = pyinfra_arguments.all_global_arguments


class DataSnapshot:
    """A host's data as ``HostData`` answers attribute lookups, its layers evaluated once: the first layer that
    holds a key wins, and the value comes back as a shallow copy."""

    def __init__(self, data: HostData) -> None:
        merged: dict[str, Any] = {}
        for layer in reversed(list(extract_callable_datas(data.datas))):
            merged.update(layer)
        self.__dict__["_merged"] = merged

    def __getattr__(self, key: str) -> Any:
        try:
            return copy(self._merged[key])
        except KeyError:
            raise AttributeError(key) from None


def pop_global_arguments(state: State, host: Host, kwargs: dict[str, Any]) -> tuple[AllArguments, list[str]]:
    """
    pyinfra's ``pop_global_arguments`` (the same answer, ``kwargs`` popped the same way), with the host's data
    read from a snapshot taken once for this call. Nothing in it yields to another greenlet, so no other
    code sees the snapshot in place of ``host.data``.

    + state: the run's state
    + host: the host the operation or fact is for
    + kwargs: the call's keyword arguments; its global arguments are popped

    **Example:**

    .. code:: python

        global_arguments, keys = pop_global_arguments(state, host, {"_sudo": True, "path": "/etc"})
    """
    data = host.data
    host.data = DataSnapshot(data)  # type: ignore[assignment]
    try:
        return _PYINFRA_POP_GLOBAL_ARGUMENTS(state, host, kwargs)
    finally:
        host.data = data


_PYINFRA_POP_GLOBAL_ARGUMENTS = pyinfra_arguments.pop_global_arguments


def install() -> None:
    """Put the replacements where pyinfra looks them up; calling it again changes nothing."""
    global _installed
    if _installed:
        return
    pyinfra_operation.get_operation_order_from_stack = operation_order_from_stack
    pyinfra_arguments.all_global_arguments = all_global_arguments
    pyinfra_facts.all_global_arguments = all_global_arguments
    for module in (pyinfra_operation, pyinfra_facts, pyinfra_deploy):  # each imported the function by name
        module.pop_global_arguments = pop_global_arguments
    _installed = True
