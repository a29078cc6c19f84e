"""Docker check-then-act operations: NVIDIA runtime, images by tag, JIT cache volume (facts: rigforge.facts.docker).

Each operation reads a fact, compares it with what is wanted and yields commands only when they are
needed, so a converged host plans nothing (``docker.build`` in pyinfra checks tags only, and
``nvidia-ctk runtime configure`` rewrites daemon.json on every call: neither is used bare here).
"""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra import host, logger, state
from pyinfra.api import FactBase, FunctionCommand, OperationError, QuoteString, StringCommand, operation
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_host
from pyinfra.facts.files import Sha256File

from rigforge.facts.docker import DAEMON_JSON, DOCKER_SOCKET, DockerDaemonRuntimes, DockerEngine
from rigforge.facts.images import DockerImageId

#: File at the root of the JIT cache volume naming the image (by ID) whose kernels it may hold.
JIT_OWNER_FILE = ".rigforge-image"


def _first_line(output: list[str]) -> str | None:
    return next((line.strip() for line in output if line.strip()), None)


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
    Reload docker.service when daemon.json names a runtime the running engine has not loaded.

    + runtime: runtime that must be loaded once it is configured

    A reload (SIGHUP: the ``ExecReload`` of Debian's and Docker's docker.service) makes dockerd read
    daemon.json's runtimes again without stopping anything; a restart would stop every container of the
    owner's that has no restart policy. The reload follows the state, not a flag from an earlier
    operation, so a run interrupted between configuring and reloading still reloads next time. An engine
    this host's systemd does not run (a socket from elsewhere) is left alone with a warning: it must be
    reloaded where it runs.

    **Example:**

    .. code:: python

        engine_loaded_runtime(name="Reload Docker to load the nvidia runtime")
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
        # reload-or-restart: a reload of the running engine (both units define ExecReload), a start if it stopped.
        yield StringCommand("systemctl", "reload-or-restart", "docker.service")


@operation()
def other_docker_kept(found: str, blocking: bool):
    """
    Fail this host, changing nothing, when getting an engine would mean installing docker.io over another Docker.

    + found: what is installed, in words (packages, or the ``docker`` command no package owns)
    + blocking: whether the role would have to install over it (``replacing_would_block``)

    **Example:**

    .. code:: python

        other_docker_kept(name="Keep the Docker found on the rig", found="podman-docker 4.3.1", blocking=True)
    """
    if not blocking:
        host.noop(f"no Docker of another kind to install over ({found or 'none'})")
        return
    if state.current_stage == StateStage.Prepare:
        # A dry run never executes the stop below: count the host as failed now so it still exits non-zero.
        state.failed_hosts.add(ctx_host.get())
    yield FunctionCommand(_refuse_other_docker, (found,), {})


def _refuse_other_docker(state: Any, host: Any, found: str) -> bool:
    host.log_styled(f"container layer: {found} is installed and no engine answers; rigforge installs docker.io "
                    "only on a rig without Docker, and never over another one: start its engine (rigforge then "
                    "uses it) or remove it yourself; nothing was changed by this layer", fg="red",
                    log_func=logger.error)
    return False


class LiveOutputCommand(StringCommand):
    """A command whose output lines are printed as they come, without ``-vvv`` (progress of long builds)."""

    def execute(self, state, host, connector_arguments):  # type: ignore[no-untyped-def] - pyinfra's signature
        connector_arguments.update(self.connector_arguments)
        return host.run_shell_command(self, print_output=True, print_input=state.print_input, **connector_arguments)


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
