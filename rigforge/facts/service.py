"""The engine's systemd service as systemd sees it.

``EngineService`` reads ``systemctl show`` plus the ``RIGFORGE_INPUTS`` value in the environment of the
running main process: that value is what the process was started from, so comparing it with the inputs
wanted now says whether a restart is due, across runs, reboots and crashed deploys alike.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from pyinfra.api import FactBase

from rigforge.reads.parsing import split_sections

INPUTS_VARIABLE = "RIGFORGE_INPUTS"
_SHOW_PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "UnitFileState",
    "NeedDaemonReload",
    "MainPID",
    "InvocationID",
    "ActiveEnterTimestampMonotonic",
)


@dataclass(frozen=True)
class ServiceState:
    """What systemd says about a unit, and the inputs digest its running process started from.

    + load_state: ``loaded``, ``not-found``…
    + active_state: ``active``, ``activating``, ``failed``, ``inactive``…
    + enabled: the unit file state is ``enabled``
    + needs_daemon_reload: a unit file or drop-in changed on disk since systemd loaded it
    + main_pid: 0 when no process runs
    + running_inputs: ``RIGFORGE_INPUTS`` of the main process, None when absent or no process
    """

    load_state: str
    active_state: str
    sub_state: str
    enabled: bool
    needs_daemon_reload: bool
    main_pid: int
    invocation_id: str
    active_since_monotonic_us: int
    running_inputs: str | None

    @property
    def running(self) -> bool:
        """The service is up (not starting, stopping, failed or in a restart loop)."""
        return self.active_state == "active" and self.main_pid > 0


NO_SERVICE = ServiceState("not-found", "inactive", "dead", False, False, 0, "", 0, None)


def parse_service_state(text: str) -> ServiceState:
    """Parse ``systemctl show -p ...`` lines, then the ``## inputs`` section (the process's variable)."""
    sections = split_sections(text)
    props: dict[str, str] = {}
    for line in sections[""].splitlines():
        name, sep, value = line.partition("=")
        if sep:
            props[name.strip()] = value.strip()
    if not props:
        return NO_SERVICE
    inputs = None
    for line in sections.get("inputs", "").splitlines():
        name, sep, value = line.partition("=")
        if sep and name == INPUTS_VARIABLE:
            inputs = value.strip()
    return ServiceState(
        load_state=props.get("LoadState", "not-found"),
        active_state=props.get("ActiveState", "inactive"),
        sub_state=props.get("SubState", ""),
        enabled=props.get("UnitFileState") == "enabled",
        needs_daemon_reload=props.get("NeedDaemonReload") == "yes",
        main_pid=_int(props.get("MainPID")),
        invocation_id=props.get("InvocationID", ""),
        active_since_monotonic_us=_int(props.get("ActiveEnterTimestampMonotonic")),
        running_inputs=inputs,
    )


def _int(value: str | None) -> int:
    return int(value) if value and value.isdigit() else 0


class EngineService(FactBase[ServiceState]):
    """
    Returns a unit's ``ServiceState``; ``NO_SERVICE`` where systemctl is missing or says nothing.

    .. code:: python

        state = host.get_fact(EngineService, unit="rigforge-engine.service")
        if not state.running or state.running_inputs != wanted:
            ...
    """

    def command(self, unit: str) -> str:
        props = ",".join(_SHOW_PROPERTIES)
        unit = shlex.quote(unit)
        # The running process's own environment is the record of what it was started with.
        return (
            f"systemctl show {unit} -p {props} 2>/dev/null; echo '## inputs'; "
            f"pid=$(systemctl show {unit} -p MainPID --value 2>/dev/null); "
            f'[ "${{pid:-0}}" -gt 0 ] 2>/dev/null && tr "\\000" "\\n" < /proc/$pid/environ 2>/dev/null '
            f"| grep '^{INPUTS_VARIABLE}=' || true"
        )

    def requires_command(self, unit: str) -> str:
        return "systemctl"

    @staticmethod
    def default() -> ServiceState:
        return NO_SERVICE

    def process(self, output: list[str]) -> ServiceState:
        return parse_service_state("\n".join(output))


def parse_health_answer(output: list[str]) -> bool:
    """True when the health command printed ``healthy`` (curl got a 2xx answer)."""
    return any(line.strip() == "healthy" for line in output)


class EngineAnswersHealthy(FactBase[bool]):
    """
    Whether the engine answers its health endpoint now (one curl, 5 s at most); False without curl.

    .. code:: python

        if not host.get_fact(EngineAnswersHealthy, url="http://127.0.0.1:8080/health"):
            ...
    """

    def command(self, url: str) -> str:
        return f"curl -fsS -o /dev/null --max-time 5 {shlex.quote(url)} 2>/dev/null && echo healthy || echo not-healthy"

    @staticmethod
    def default() -> bool:
        return False

    def process(self, output: list[str]) -> bool:
        return parse_health_answer(output)
