"""Planned apt operations, read back: ``commands`` gives each planned operation's commands as raw text
(the ``planning`` fixture of tests/unit/conftest.py plans them on ``@local``)."""

from __future__ import annotations

from pyinfra.api import State, StringCommand
from pyinfra.api.host import Host


def commands(state: State, host: Host) -> list[list[str]]:
    """Each planned operation's commands, as their raw text (Python callbacks as ``callback NAME``)."""
    return [[command.get_raw_value() if isinstance(command, StringCommand) else f"callback {command.function.__name__}"
             for command in state.get_op_data_for_host(host, op).command_generator()]
            for op in state.get_op_order()]
