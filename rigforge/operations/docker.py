"""Docker facts and check-then-act operations: engine state, NVIDIA runtime, images by tag, JIT cache volume.

Each operation reads a fact, compares it with what is wanted and yields commands only when they are
needed, so a converged host plans nothing (``docker.build`` in pyinfra checks tags only, and
``nvidia-ctk runtime configure`` rewrites daemon.json on every call: neither is used bare here).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from pyinfra import host, logger
from pyinfra.api import FactBase, OperationError, QuoteString, StringCommand, operation
from pyinfra.facts.files import Sha256File

DOCKER_SOCKET = "/var/run/docker.sock"
DAEMON_JSON = "/etc/docker/daemon.json"
#: File at the root of the JIT cache volume naming the image (by ID) whose kernels it may hold.
JIT_OWNER_FILE = ".rigforge-image"


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


def configured_runtimes(text: str) -> tuple[str, ...] | None:
    """Runtime names in daemon.json text: () for no file or no runtimes, None when it is not valid JSON."""
    if not text.strip():
        return ()
    try:
        config = json.loads(text)
    except json.JSONDecodeError:
        return None
    runtimes = config.get("runtimes") if isinstance(config, dict) else None
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


def _first_line(output: list[str]) -> str | None:
    return next((line.strip() for line in output if line.strip()), None)


class DockerImageId(FactBase[str | None]):
    """The ID of a local image by reference (``sha256:…``), or None when there is none (or no CLI)."""

    def command(self, ref: str) -> str:
        return (f"command -v docker >/dev/null 2>&1 && docker image inspect --format '{{{{.Id}}}}' "
                f"{shlex.quote(ref)} 2>/dev/null || true")

    def process(self, output: list[str]) -> str | None:
        return _first_line(output)


def _helper_run(volume: str, image: str, entrypoint: str) -> str:
    # A throwaway container of the image itself (present by then, never pulled) reaches the volume wherever
    # the engine keeps it, also when the engine runs outside this host.
    return (f"docker run --rm --pull never --network none --user 0:0 --entrypoint {entrypoint} "
            f"-v {shlex.quote(volume)}:/cache {shlex.quote(image)}")


class JitCacheOwner(FactBase[str | None]):
    """The image ID recorded in a JIT cache volume, or None (no volume, no record, image not there yet)."""

    def command(self, volume: str, image: str) -> str:
        return (f"command -v docker >/dev/null 2>&1 || exit 0; "
                f"docker volume inspect {shlex.quote(volume)} >/dev/null 2>&1 || exit 0; "
                f"docker image inspect {shlex.quote(image)} >/dev/null 2>&1 || exit 0; "
                f"{_helper_run(volume, image, 'cat')} "
                f"/cache/{JIT_OWNER_FILE} 2>/dev/null || true")

    def process(self, output: list[str]) -> str | None:
        return _first_line(output)


@operation()
def nvidia_runtime_configured(runtime: str = "nvidia"):
    """
    Run ``nvidia-ctk runtime configure --runtime=docker`` only when daemon.json lacks the runtime.

    + runtime: runtime name nvidia-ctk adds to /etc/docker/daemon.json

    **Example:**

    .. code:: python

        nvidia_runtime_configured(name="Add the nvidia runtime to daemon.json")
    """
    configured = host.get_fact(DockerDaemonRuntimes)
    if configured is None:
        raise OperationError(f"{DAEMON_JSON} is not valid JSON; fix or remove it, then run again")
    if runtime in configured:
        host.noop(f"{DAEMON_JSON} has the {runtime} runtime")
        return
    yield StringCommand("nvidia-ctk", "runtime", "configure", "--runtime=docker")


@operation()
def engine_loaded_runtime(runtime: str = "nvidia"):
    """
    Restart docker.service when daemon.json names a runtime the running engine has not loaded.

    + runtime: runtime that must be loaded once it is configured

    The restart follows the state, not a flag from an earlier operation, so a run interrupted between
    configuring and restarting still restarts next time. An engine this host's systemd does not run
    (a socket from elsewhere) is left alone with a warning: it must be restarted where it runs.

    **Example:**

    .. code:: python

        engine_loaded_runtime(name="Restart Docker to load the nvidia runtime")
    """
    configured = host.get_fact(DockerDaemonRuntimes) or ()
    engine = host.get_fact(DockerEngine)
    if runtime not in configured:
        host.noop(f"{runtime} runtime not configured in {DAEMON_JSON}")
    elif runtime in engine.runtimes:
        host.noop(f"the Docker engine has the {runtime} runtime loaded")
    elif engine.external:
        logger.warning(f"[{host.name}] the Docker engine on {DOCKER_SOCKET} is not run by this host's systemd: "
                       f"restart it where it runs to load the {runtime} runtime")
        host.noop(f"engine not managed here; {runtime} runtime configured in {DAEMON_JSON} only")
    else:
        yield StringCommand("systemctl", "restart", "docker.service")


class LiveOutputCommand(StringCommand):
    """A command whose output lines are printed as they come, without ``-vvv`` (progress of long builds)."""

    def execute(self, state, host, connector_arguments):  # type: ignore[no-untyped-def] - pyinfra's signature
        connector_arguments.update(self.connector_arguments)
        return host.run_shell_command(self, print_output=True, print_input=state.print_input, **connector_arguments)


@operation()
def image_built(tag: str, arguments: list[str], log: str, script: str):
    """
    Build an image unless one with ``tag`` exists; the tag must name the build's inputs (a content hash).

    + tag: image tag, also passed in ``arguments``
    + arguments: everything after ``docker build`` (tag, labels, build args, Dockerfile, context)
    + log: file on the host that keeps the whole build output
    + script: the build runner on the host (prints progress, keeps the log, summarises)

    **Example:**

    .. code:: python

        image_built(name="Build the engine image", tag=plan.tag, arguments=plan.docker_build_arguments(),
                    log=plan.log_path, script="/var/lib/rigforge/images/build-image.sh")
    """
    if host.get_fact(DockerImageId, ref=tag):
        host.noop(f"image {tag} is present")
        return
    host.log(f"will build {tag} (an engine image takes 30-90 minutes on a rig; its log: {log})", logger.info)
    # On a terminal: a controller that goes away hangs up the build's docker client, which ends the build
    # (a tag is given only to a finished image) instead of leaving it running detached beside the next run's.
    yield LiveOutputCommand("sh", QuoteString(script), QuoteString(log), *(QuoteString(a) for a in arguments),
                            _get_pty=True)


@operation()
def image_pulled(ref: str):
    """
    Pull an image unless it is present locally.

    + ref: image reference (``name:tag`` or ``name@sha256:…``)

    **Example:**

    .. code:: python

        image_pulled(name="Pull the engine image", ref="vllm/vllm-openai:cu130-nightly")
    """
    if host.get_fact(DockerImageId, ref=ref):
        host.noop(f"image {ref} is present")
        return
    yield LiveOutputCommand("docker", "pull", QuoteString(ref))


@operation()
def jit_cache_emptied(volume: str, image: str):
    """
    Empty a JIT cache volume unless it records that its kernels come from ``image`` (by image ID).

    + volume: named Docker volume the engine mounts for its JIT caches
    + image: the image the engine runs (present by the time this operation executes)

    Kernels compiled by an older image, FlashInfer or CUTLASS break a newer one (rig-facts §9 row 23);
    after emptying, the volume records the image ID, so the next run leaves it alone.

    **Example:**

    .. code:: python

        jit_cache_emptied(name="Empty the JIT cache", volume="rigforge-jit-cache", image=plan.tag)
    """
    owner = host.get_fact(JitCacheOwner, volume=volume, image=image)
    image_id = host.get_fact(DockerImageId, ref=image)
    if owner is not None and owner == image_id:
        host.noop(f"volume {volume} holds JIT caches of {image} only")
        return
    # The ID is read when the command runs: at planning time a fresh build has none yet.
    script = f'find /cache -mindepth 1 -delete && printf "%s\\n" "$1" > /cache/{JIT_OWNER_FILE}'
    yield (f"id=$(docker image inspect --format '{{{{.Id}}}}' {shlex.quote(image)}) && "
           f"{_helper_run(volume, image, '/bin/sh')} "
           f"-c {shlex.quote(script)} jit-cache \"$id\"")


@operation()
def context_file_fetched(url: str, dest: str, sha256: str, fetch_script: str):
    """
    Download a build-context file (a patch) on the host, verified by sha256, unless it is already there.

    + url: where the file is published
    + dest: path in the build context
    + sha256: expected sha256; a download that does not match is deleted and the operation fails
    + fetch_script: rigforge's fetch.py on the host (resumable, verified, renamed into place when right)

    **Example:**

    .. code:: python

        context_file_fetched(name="Fetch the K=64 patch", url=patch.url, sha256=patch.sha256,
                             dest="/var/lib/rigforge/images/sglang-b12x/patches/01-k64.patch",
                             fetch_script="/var/lib/rigforge/images/fetch.py")
    """
    if host.get_fact(Sha256File, path=dest) == sha256:
        host.noop(f"{dest} is present with sha256 {sha256[:12]}…")
        return
    yield StringCommand("python3", QuoteString(fetch_script), QuoteString(url), QuoteString(dest),
                        "--sha256", sha256)
