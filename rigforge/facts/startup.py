"""The engine's start-up record: the lines the health wait kept of the engine's current start.

One command: the unit's current InvocationID, then the record (rigforge.recipes.startup.STARTUP_RECORD, written
by templates/service/wait-healthy.sh.j2 once the engine answered). rigforge.recipes.startup.startup_verdict judges
the pair against a recipe's ``startup`` declaration.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from pyinfra.api import FactBase

from rigforge.recipes.startup import STARTUP_RECORD

INVOCATION_MARK = "## invocation"


@dataclass(frozen=True)
class StartupRecord:
    """+ invocation: the unit's current InvocationID ("" when it is not running) + record: the record's text"""

    invocation: str
    record: str


def parse_startup_record(text: str) -> StartupRecord:
    """Parse the fact's output: its first line ``## invocation <id>``, then the record as it is on the rig."""
    head, _, record = text.partition("\n")
    if not head.startswith(INVOCATION_MARK):
        raise ValueError(f"EngineStartupRecord: no '{INVOCATION_MARK}' line in its output")
    return StartupRecord(head[len(INVOCATION_MARK):].strip(), record)


class EngineStartupRecord(FactBase[StartupRecord]):
    """
    Returns the ``StartupRecord`` of the engine: its current invocation and the health wait's record of its start.

    .. code:: python

        record = host.get_fact(EngineStartupRecord)
    """

    def command(self) -> str:
        from rigforge.engines import UNIT_NAME

        return (f"echo \"{INVOCATION_MARK} $(systemctl show -p InvocationID --value {shlex.quote(UNIT_NAME)} "
                f"2>/dev/null)\"; cat {STARTUP_RECORD} 2>/dev/null; true")

    def process(self, output: list[str]) -> StartupRecord:
        return parse_startup_record("\n".join(output) + "\n")
