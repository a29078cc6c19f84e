"""pyinfra's per-operation bookkeeping at a cost that does not grow with the source files on the stack.

pyinfra plans every operation once per host, and for each one it works out the operation's place in the run
from the call stack with ``inspect.stack()`` (pyinfra/api/util.py, ``get_operation_order_from_stack``) and
lists its global arguments with ``typing.get_type_hints`` (pyinfra/api/arguments.py,
``all_global_arguments``). ``inspect.stack()`` reads a line of source for every frame and looks up each
frame's module by scanning ``sys.modules``; on 16 sandbox hosts those two calls were a third of the
controller's time in a no-op ``deploys/host.py`` (cProfile), and the controller's time is what a fleet
costs beyond one host.

The replacements give the same answers from the frames alone (a frame's ``co_filename`` and ``f_lineno`` are
what ``inspect.getframeinfo`` reports for code compiled from a file) and from the type hints read once;
``tests/unit/test_planning.py`` compares them with pyinfra's own on real stacks. ``install()`` is called by
the deploy lock (rigforge/operations/lock.py), the first thing every deploy does.
"""

from __future__ import annotations

import importlib
import sys
from functools import cache
from types import FrameType

import pyinfra
from pyinfra.api.state import State
from pyinfra.api.util import PYINFRA_INSTALL_DIR

# The modules themselves: ``pyinfra.api.operation`` as an attribute of ``pyinfra.api`` is the decorator.
pyinfra_arguments = importlib.import_module("pyinfra.api.arguments")
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


def install() -> None:
    """Put the replacements where pyinfra looks them up; calling it again changes nothing."""
    global _installed
    if _installed:
        return
    pyinfra_operation.get_operation_order_from_stack = operation_order_from_stack
    pyinfra_arguments.all_global_arguments = all_global_arguments
    pyinfra_facts.all_global_arguments = all_global_arguments
    _installed = True
