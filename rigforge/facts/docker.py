"""Docker facts: the engine answering on the socket, which Docker is installed, and what the owner has in it.

All read-only. ``DockerEngine`` says whether an engine answers and who runs it; ``DockerSetup`` says where the
``docker`` command comes from, which keys the owner set in daemon.json and which containers exist (running or
not, and which of them use GPUs). With ``DpkgPackages`` (rigforge/facts/packages.py) they tell which Docker a
rig has: the distribution's ``docker.io``, Docker CE from Docker's repository, something else, or none
(``docker_install``), which the container role and the "what is already there" table both read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyinfra.api import FactBase

from rigforge.reads.parsing import split_sections

DOCKER_SOCKET = "/var/run/docker.sock"
DAEMON_JSON = "/etc/docker/daemon.json"


@dataclass(frozen=True)
class EngineState:
    """What the host sees of a Docker engine: the CLI, the API on the socket, and who runs the daemon."""

    cli: str | None  # path of the docker CLI, None when not installed
    server_version: str | None  # None when nothing answers on the socket
    runtimes: tuple[str, ...]  # runtimes the running engine has loaded
    systemd_unit: str  # `systemctl is-active docker.service`: active, inactive, failed, unknown…

    @property
    def answers(self) -> bool:
        return self.server_version is not None

    @property
    def external(self) -> bool:
        """An engine answers on the socket but this host's systemd does not run it (e.g. a mounted socket)."""
        return self.answers and self.systemd_unit != "active"


def parse_engine_state(lines: list[str]) -> EngineState:
    """Parse the ``key=value`` lines of ``DockerEngine`` (``info`` is the API's /info JSON, or empty)."""
    values = dict(line.split("=", 1) for line in lines if "=" in line)
    info: dict = {}
    if values.get("info", "").strip():
        try:
            info = json.loads(values["info"])
        except json.JSONDecodeError:
            info = {}
    version = info.get("ServerVersion") or None
    return EngineState(
        cli=values.get("cli", "").strip() or None,
        server_version=version,
        runtimes=tuple(sorted(info.get("Runtimes") or {})) if version else (),
        systemd_unit=values.get("systemd", "").strip() or "unknown",
    )


def parse_daemon_json(text: str) -> dict | None:
    """daemon.json as a dict: {} for no file or an empty one, None when it is not a JSON object."""
    if not text.strip():
        return {}
    try:
        config = json.loads(text)
    except json.JSONDecodeError:
        return None
    return config if isinstance(config, dict) else None


def configured_runtimes(text: str) -> tuple[str, ...] | None:
    """Runtime names in daemon.json text: () for no file or no runtimes, None when it is not valid JSON."""
    config = parse_daemon_json(text)
    if config is None:
        return None
    runtimes = config.get("runtimes")
    return tuple(sorted(runtimes)) if isinstance(runtimes, dict) else ()


class DockerEngine(FactBase[EngineState]):
    """The Docker CLI, the engine answering on /var/run/docker.sock (asked with curl) and docker.service."""

    def command(self) -> str:
        # The API is asked before systemctl: a socket-activated docker.service is started by the question.
        # curl reaches the socket without the CLI (a mounted socket); the CLI answers where curl is missing.
        return (
            'echo "cli=$(command -v docker || true)"; '
            f'echo "info=$(curl -sf --max-time 10 --unix-socket {DOCKER_SOCKET} http://localhost/info '
            "|| docker info --format '{{json .}}' 2>/dev/null || true)\"; "
            'echo "systemd=$(systemctl is-active docker.service 2>/dev/null || true)"'
        )

    def process(self, output: list[str]) -> EngineState:
        return parse_engine_state(output)


class DockerDaemonRuntimes(FactBase[tuple[str, ...] | None]):
    """Runtimes named in /etc/docker/daemon.json; None when the file is not valid JSON."""

    def command(self) -> str:
        return f"cat {DAEMON_JSON} 2>/dev/null || true"

    def default(self) -> tuple[str, ...]:
        # pyinfra gives the default for empty output: no file, or an empty one.
        return ()

    def process(self, output: list[str]) -> tuple[str, ...] | None:
        return configured_runtimes("\n".join(output))


@dataclass(frozen=True)
class Container:
    """A container the engine knows, running or not."""

    name: str
    image: str
    status: str  # running, exited, created, paused, restarting, dead
    started_at: str
    uses_gpus: bool


@dataclass(frozen=True)
class DockerOwnerSetup:
    """Where ``docker`` comes from and what the owner keeps in the engine (all read, nothing changed)."""

    cli: str | None  # path of the docker command, None when there is none
    cli_package: str | None  # the dpkg package that owns it, None when no package does
    daemon_keys: tuple[str, ...] | None  # top-level keys of daemon.json; None when it is not a JSON object
    containers: tuple[Container, ...]  # empty when no engine answered the CLI

    @property
    def running(self) -> tuple[Container, ...]:
        return tuple(c for c in self.containers if c.status == "running")


def _uses_gpus(host_config: dict) -> bool:
    # `--gpus` becomes a device request (driver nvidia, or capability gpu); `--runtime=nvidia` and
    # `--device /dev/nvidia0` are the older ways: any of them gives the container the GPUs.
    if host_config.get("Runtime") == "nvidia":
        return True
    for request in host_config.get("DeviceRequests") or []:
        capabilities = {cap for group in request.get("Capabilities") or [] for cap in group}
        if request.get("Driver") == "nvidia" or "gpu" in capabilities:
            return True
    return any(str(device.get("PathOnHost", "")).startswith("/dev/nvidia")
               for device in host_config.get("Devices") or [])


def parse_container(line: str) -> Container | None:
    """One line of ``docker inspect --format '{{json .}}'``; None for a line that is not a container."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or "Name" not in data:
        return None
    state = data.get("State") or {}
    return Container(
        name=str(data["Name"]).lstrip("/"),
        image=str((data.get("Config") or {}).get("Image", "")),
        status=str(state.get("Status", "")),
        started_at=str(state.get("StartedAt", "")),
        uses_gpus=_uses_gpus(data.get("HostConfig") or {}),
    )


def parse_owner_setup(text: str) -> DockerOwnerSetup:
    """Parse the sections of ``DockerSetup``'s output."""
    sections = split_sections(text)
    cli = sections.get("cli", "").strip() or None
    owner_line = sections.get("owner", "").strip().splitlines()
    # `dpkg -S` prints `package[, package…]: path`; a diversion line starts with "diversion by".
    owners = [line.split(":", 1)[0] for line in owner_line if ": " in line and not line.startswith("diversion")]
    config = parse_daemon_json(sections.get("daemon", ""))
    containers = (parse_container(line) for line in sections.get("containers", "").splitlines() if line.strip())
    return DockerOwnerSetup(
        cli=cli,
        cli_package=owners[0].split(",")[0].strip() if owners else None,
        daemon_keys=tuple(sorted(config)) if config is not None else None,
        containers=tuple(c for c in containers if c is not None),
    )


class DockerSetup(FactBase[DockerOwnerSetup]):
    """The ``docker`` command and its package, daemon.json's keys, and every container with its state."""

    def command(self) -> str:
        # The CLI's real path is asked of dpkg as well as the path found: usrmerge puts one file under both.
        return (
            'c=$(command -v docker || true); echo "## cli"; echo "$c"; echo "## owner"; '
            '[ -n "$c" ] && { dpkg -S "$c" 2>/dev/null || dpkg -S "$(readlink -f "$c")" 2>/dev/null; }; '
            f'echo "## daemon"; cat {DAEMON_JSON} 2>/dev/null; echo; echo "## containers"; '
            '[ -n "$c" ] && docker ps -aq --no-trunc 2>/dev/null | xargs -r docker inspect '
            "--format '{{json .}}' 2>/dev/null; true"
        )

    def process(self, output: list[str]) -> DockerOwnerSetup:
        return parse_owner_setup("\n".join(output))
