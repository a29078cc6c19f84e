"""The engine's start-up record: the lines the health wait kept of the engine's current start.

One command: the unit's current InvocationID, then the record (rigforge.recipes.startup.STARTUP_RECORD, written
by templates/service/wait-healthy.sh.j2 once the engine answered). An engine started without the health wait (a
reboot, a restart by hand) has a record of an earlier start: then the same lines are read from the journal of its
current start, headed as the wait heads them. rigforge.recipes.startup.startup_verdict judges the pair against a
recipe's ``startup`` declaration.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from pyinfra.api import FactBase

from rigforge.recipes.startup import STARTUP_RECORD, startup_needles

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

        record = host.get_fact(EngineStartupRecord, kind="vllm")
    """

    def command(self, kind: str) -> str:
        """+ kind: the engine's kind, whose needles pick its start-up lines from the journal"""
        from rigforge.serving.engines import UNIT_NAME

        needles = " ".join(f"-e {shlex.quote(needle)}" for needle in startup_needles(kind)) or "-e ' '"
        return (f"id=$(systemctl show -p InvocationID --value {shlex.quote(UNIT_NAME)} 2>/dev/null); "
                f"echo \"{INVOCATION_MARK} $id\"; "
                f"if [ -n \"$id\" ] && [ \"$(head -n 1 {STARTUP_RECORD} 2>/dev/null)\" != \"# invocation $id\" ]; "
                f"then echo \"# invocation $id\"; journalctl _SYSTEMD_INVOCATION_ID=\"$id\" --no-pager -q -o cat "
                f"2>/dev/null | grep -F {needles} | tail -n 400; else cat {STARTUP_RECORD} 2>/dev/null; fi; true")

    def process(self, output: list[str]) -> StartupRecord:
        return parse_startup_record("\n".join(output) + "\n")
