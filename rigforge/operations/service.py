"""The engine service: restarted exactly when what it starts from changed, then waited for until healthy.

What the engine starts from — its unit, the env file, the image (or engine install) and the weights
manifest — is folded into one digest. A drop-in puts the digest into the service's environment, so the
running process carries the digest it was started with (``/proc/<pid>/environ``). The service is
restarted when that differs from the digest wanted now: one restart however many inputs changed, none
after a reboot or on a second run, and a deploy that died between writing and restarting is finished by
the next one. A service already running with the wanted digest that does not answer healthy (a run was
interrupted while it waited) is waited for again, not restarted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

from pyinfra import host
from pyinfra.api import FunctionCommand, QuoteString, StringCommand, operation
from pyinfra.facts.files import File, Sha256File

from rigforge.facts.images import DockerImageId
from rigforge.facts.service import EngineAnswersHealthy, EngineService, ServiceState
from rigforge.operations.files import managed_file

ABSENT = "absent"


def inputs_digest(inputs: dict[str, str]) -> str:
    """A short stable digest of named inputs (file hashes, image id, unit hash...)."""
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:20]


def restart_reason(state: ServiceState, wanted: str) -> str | None:
    """Why the service must be (re)started, or None when the running process has the wanted inputs."""
    if not state.running:
        return f"the service is {state.active_state} ({state.sub_state or 'no process'})"
    if state.running_inputs != wanted:
        return f"its inputs changed ({state.running_inputs or 'unknown'} -> {wanted})"
    return None


@operation()
def engine_service(unit: str, dropin: str, render_dropin: Callable[[str], str], inputs: dict[str, str],
                   watched_files: list[str], image: str | None, health_url: str, health_timeout_s: int,
                   wait_script: str, drain_first: FunctionCommand | None = None):
    """
    Enable the engine unit and (re)start it when its inputs changed, then wait until it answers healthy.

    + unit: systemd unit name (``rigforge-engine.service``), whose file a previous operation wrote
    + dropin: path of the drop-in carrying the inputs digest
    + render_dropin: turns the digest into the drop-in's text
    + inputs: inputs known on this machine (the unit's sha256, the engine install)
    + watched_files: files on the host whose content the engine reads at start (env file, weights manifest)
    + image: the container image the unit runs (its local id is an input), None for a native engine
    + health_url: polled after a (re)start
    + health_timeout_s: how long to poll before printing the journal and failing
    + wait_script: the health-wait script on the host
    + drain_first: run before restarting an engine that is serving (the fleet gateway's drain, roles/drain.py);
      its return is a later operation of the caller's, after what proves the restart; None: no drain

    **Example:**

    .. code:: python

        engine_service(name="Run the engine", unit=UNIT, dropin=DROPIN, render_dropin=lambda d: ...,
                       inputs={"unit": unit_sha}, watched_files=[ENV_FILE, MANIFEST], image=None,
                       health_url="http://127.0.0.1:8080/health", health_timeout_s=120, wait_script=WAIT)
    """
    everything = dict(inputs)
    for path in watched_files:
        everything[path] = host.get_fact(Sha256File, path=path) or ABSENT
    if image is not None:
        everything["image"] = host.get_fact(DockerImageId, ref=image) or ABSENT
    digest = inputs_digest(everything)
    content = render_dropin(digest)
    state = host.get_fact(EngineService, unit=unit)
    dropin_changed = not host.get_fact(File, path=dropin) or (
        host.get_fact(Sha256File, path=dropin) != hashlib.sha256(content.encode()).hexdigest()
    )
    if dropin_changed:
        yield from managed_file._inner(dest=dropin, content=content)  # creates the .d folder when missing
    if dropin_changed or state.needs_daemon_reload or state.load_state != "loaded":
        yield StringCommand("systemctl", "daemon-reload")
    if not state.enabled:
        yield StringCommand("systemctl", "enable", QuoteString(unit))
    reason = restart_reason(state, digest)
    if reason is None:
        if host.get_fact(EngineAnswersHealthy, url=health_url):
            if not dropin_changed and state.enabled:
                host.noop(f"{unit} runs with its current inputs ({digest})")
            return
        # Started by a run that was interrupted before it saw the engine healthy (or unhealthy since).
        host.log(f"{unit} runs with its current inputs but does not answer {health_url}: waiting for it")
        yield StringCommand("sh", QuoteString(wait_script), QuoteString(unit), QuoteString(health_url),
                            str(health_timeout_s))
        return
    host.log(f"{unit}: restarting because {reason}")
    if drain_first is not None and state.running:  # a stopped engine serves nobody: nothing to drain
        yield drain_first
    yield StringCommand("systemctl", "restart", QuoteString(unit))
    yield StringCommand("sh", QuoteString(wait_script), QuoteString(unit), QuoteString(health_url),
                        str(health_timeout_s))


@operation()
def file_unless_present(dest: str, content: str, mode: str = "644"):
    """
    Create ``dest`` with ``content`` when it does not exist; leave an existing file alone, whoever wrote it.

    + dest: absolute path (its folder must exist)
    + content: text for a new file
    + mode: octal permissions of a new file

    For a file another role owns but a service needs to exist (the engine env file before the nccl
    role has run on a host).

    **Example:**

    .. code:: python

        file_unless_present(name="Engine env file", dest="/etc/rigforge/engine.env", content="# empty\n")
    """
    if host.get_fact(File, path=dest):
        host.noop(f"{dest} exists")
        return
    yield from managed_file._inner(dest=dest, content=content, mode=mode)
