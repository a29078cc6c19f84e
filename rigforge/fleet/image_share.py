"""One build per fleet: the first rig that needs an image builds it, the others load it from a rig that has it.

Runs while the deploy executes, in the images role's build operation (a Python callback per rig). pyinfra runs
that operation on every rig of the run at once, so the rigs meet here, on the controller:

- a rig that needs tag T looks once per run for the rigs of the run that already have T (``docker image
  inspect``); it gets T from the first of them;
- when none has it, the first rig to get here builds it (the build script, its output printed as it comes); the
  others wait for that build and then get T from the rig that built it. A failed build fails them too, with
  one line each: the image is not built once per rig by accident;
- getting T is ``docker save T`` on the rig that has it piped through this machine into ``docker load`` on the
  rig that needs it (two SSH channels, no file on either side or here). It is checked by image ID (the same as
  on the rig it came from) and by the commits in its labels (the ones this rig's record names); an image that
  does not match is removed again. A transfer cut short leaves nothing: ``docker load`` tags an image only
  once the whole archive arrived, so the next run simply transfers it again.

Only rigs reached over SSH share (a local or Docker connector builds for itself).

Example::

    yield FunctionCommand(provide_image, (Provide(tag, arguments, log, script, commits, connector),), {})
"""

from __future__ import annotations

import json
import shlex
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import gevent
import gevent.event
from paramiko import SSHException
from pyinfra import logger
from pyinfra.api import QuoteString, StringCommand
from pyinfra.api import arguments as pyinfra_arguments
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS
from pyinfra.api.host import Host
from pyinfra.api.state import State
from pyinfra.connectors.ssh import SSHConnector
from pyinfra.connectors.util import make_unix_command_for_host

from rigforge.fleet.image_commits import fleet_hosts
from rigforge.reads.read_ahead import not_a_change

CHUNK = 1 << 20
#: Connector arguments that say how to run a command, not how to write its command line.
_RUN_ONLY = ("_get_pty", "_timeout", "_stdin", "_success_exit_codes")
MB = 1e6


class ShareError(RuntimeError):
    """The image could not be taken from the other rig, or what arrived is not the image asked for."""


@dataclass(frozen=True)
class Provide:
    """What one rig needs: the tag, how to build it, and what it must carry.

    + tag: the content-hash tag
    + arguments: everything after ``docker build``
    + log: the build log on the rig
    + script: the build script on the rig
    + commits: build arg -> commit the image's labels must name (``org.rigforge.commit.<ARG>``)
    + connector: the operation's connector arguments on this rig (sudo…)
    """

    tag: str
    arguments: tuple[str, ...]
    log: str
    script: str
    commits: dict[str, str]
    connector: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Image:
    """One tag in one run: which rigs have it, and the build under way."""

    holders: list[Host] | None = None  # None until the rigs of the run were asked
    asked: gevent.event.Event = field(default_factory=gevent.event.Event)
    asking: bool = False
    builder: Host | None = None
    built: gevent.event.AsyncResult = field(default_factory=gevent.event.AsyncResult)


_images: weakref.WeakKeyDictionary[State, dict[str, _Image]] = weakref.WeakKeyDictionary()


def connector_arguments(state: State, host: Host) -> dict[str, Any]:
    """A rig's connector arguments from its data (sudo, its user…), as its own fact reads get them."""
    arguments, _ = pyinfra_arguments.pop_global_arguments(state, host, {})
    return {key: value for key, value in arguments.items() if key in CONNECTOR_ARGUMENT_KEYS}


def _shares(host: Host) -> bool:
    return isinstance(host.connector, SSHConnector) and host.connector.client is not None


def _run(state: State, host: Host, command: str, connector: dict[str, Any]) -> tuple[bool, list[str]]:
    """A read-only command on any rig of the run (its read-ahead stays valid: nothing changes there)."""
    with not_a_change(host):
        status, output = host.run_shell_command(StringCommand(command), **connector)
    return status, output.stdout_lines


def image_id(state: State, host: Host, tag: str, connector: dict[str, Any] | None = None) -> str | None:
    status, lines = _run(state, host, f"docker image inspect --format '{{{{.Id}}}}' {shlex.quote(tag)} "
                                      "2>/dev/null || true", connector or connector_arguments(state, host))
    return next((line.strip() for line in lines if line.strip().startswith("sha256:")), None) if status else None


def image_labels(state: State, host: Host, tag: str, connector: dict[str, Any]) -> dict[str, str]:
    _, lines = _run(state, host, f"docker image inspect --format '{{{{json .Config.Labels}}}}' {shlex.quote(tag)}",
                    connector)
    try:
        return json.loads("".join(lines)) or {}
    except ValueError:
        return {}


def _holders(state: State, host: Host, tag: str, entry: _Image) -> list[Host]:
    """The rigs of the run that have ``tag`` (asked once per run, in parallel; later ones wait for the answer)."""
    if entry.holders is None and not entry.asking:
        entry.asking = True
        others = [other for other in fleet_hosts(state) if other is not host and _shares(other)]
        jobs = {other: gevent.spawn(image_id, state, other, tag) for other in others}
        gevent.joinall(list(jobs.values()))
        entry.holders = [other for other, job in jobs.items() if job.successful() and job.value]  # inventory order
        entry.asked.set()
    entry.asked.wait()
    return [holder for holder in entry.holders or [] if holder is not host]


def provide_image(state: State, host: Host, need: Provide) -> bool:
    """Get ``need.tag`` onto ``host``: from a rig of the run that has it, else build it here (the first rig to
    ask) or wait for the rig that builds it. A FunctionCommand: True when the image is here."""
    entry = _images.setdefault(state, {}).setdefault(need.tag, _Image())
    holders = _holders(state, host, need.tag, entry) if _shares(host) else []
    if not holders and entry.builder is None or not _shares(host):
        return _build_here(state, host, need, entry)
    if not holders:
        assert entry.builder is not None
        host.log(f"image {need.tag}: {entry.builder.name} builds it for this run's rigs; waiting for that build, "
                 "then loading it from there", logger.info)
        if not entry.built.get():
            host.log_styled(f"image {need.tag}: the build on {entry.builder.name} failed (its output above): "
                            "nothing was built here; run the deploy again", fg="red", log_func=logger.error)
            return False
        holders = [entry.builder]
    try:
        receive(state, holders[0], host, need)
    except ShareError as error:
        host.log_styled(f"image {need.tag}: {error}", fg="red", log_func=logger.error)
        return False
    assert entry.holders is not None
    entry.holders.append(host)
    return True


def _build_here(state: State, host: Host, need: Provide, entry: _Image) -> bool:
    shared = _shares(host) and entry.builder is None
    if shared:
        entry.builder = host
    host.log(f"will build {need.tag} (an engine image takes 30-90 minutes on a rig; its log: {need.log})"
             + ("; the run's other rigs that need it get it from here" if shared else ""), logger.info)
    ok = False
    try:
        # On a terminal: a controller that goes away hangs up the build's docker client, which ends the build
        # (a tag is given only to a finished image) instead of leaving it running detached beside the next run's.
        command = StringCommand("sh", QuoteString(need.script), QuoteString(need.log),
                                *(QuoteString(argument) for argument in need.arguments))
        ok, _ = host.run_shell_command(command, print_output=True, print_input=state.print_input,
                                       **{**need.connector, "_get_pty": True})
        return bool(ok)
    finally:
        if shared:
            if ok and entry.holders is not None:
                entry.holders.append(host)
            entry.built.set(bool(ok))


def receive(state: State, source: Host, target: Host, need: Provide) -> None:
    """``docker save`` on ``source`` | ``docker load`` on ``target``, through this machine; then checked."""
    source_connector = connector_arguments(state, source)
    expected = image_id(state, source, need.tag, source_connector)
    if expected is None:
        raise ShareError(f"{source.name} no longer has it")
    target.log(f"image {need.tag}: getting it from {source.name} (docker save | docker load through this machine)",
               logger.info)
    started = time.monotonic()
    size = stream(state, source, target, need.tag, source_connector, need.connector)
    seconds = time.monotonic() - started
    found = image_id(state, target, need.tag, need.connector)
    labels = image_labels(state, target, need.tag, need.connector)
    wrong = {arg: labels.get(f"org.rigforge.commit.{arg}") for arg, commit in need.commits.items()
             if labels.get(f"org.rigforge.commit.{arg}") != commit}
    if found != expected or wrong:
        _run(state, target, f"docker image rm {shlex.quote(need.tag)} >/dev/null 2>&1 || true", need.connector)
        what = f"image ID {found}, not {expected}" if found != expected else f"commits {wrong}, not {need.commits}"
        raise ShareError(f"what arrived from {source.name} is not the image asked for ({what}); removed it")
    commits = ", ".join(f"{arg} {commit[:12]}" for arg, commit in need.commits.items()) or "no git refs"
    target.log(f"image {need.tag}: got it from {source.name}: {size / MB:.1f} MB in {seconds:.1f} s; image ID "
               f"{found[:19]} and commits ({commits}) as there", logger.info)


def _channel(state: State, host: Host, command: StringCommand, connector: dict[str, Any]) -> Any:
    assert isinstance(host.connector, SSHConnector) and host.connector.client is not None
    # What the SSH connector itself takes out before it builds the command line (pyinfra/connectors/ssh.py).
    wrapping = {key: value for key, value in connector.items() if key not in _RUN_ONLY}
    unix_command = make_unix_command_for_host(state, host, command, **wrapping)
    logger.debug("Running command on %s: (pty=False) %s", host.name, unix_command)
    channel = host.connector.client.get_transport().open_session()
    channel.exec_command(unix_command.get_raw_value())
    return channel


def stream(state: State, source: Host, target: Host, tag: str, source_connector: dict[str, Any],
           target_connector: dict[str, Any]) -> int:
    """Pipe ``docker save TAG`` on ``source`` into ``docker load`` on ``target``; return the bytes moved."""
    save = _channel(state, source, StringCommand("docker", "save", QuoteString(tag)), source_connector)
    load = _channel(state, target, StringCommand("docker", "load", "--quiet"), target_connector)
    moved = 0
    cut = ""
    try:
        try:
            while chunk := save.recv(CHUNK):
                load.sendall(chunk)
                moved += len(chunk)
            load.shutdown_write()
        except (OSError, EOFError, SSHException) as error:  # a channel gone: the statuses below say whose
            cut = f"the transfer stopped after {moved / MB:.1f} MB ({error or type(error).__name__})"
        saved, loaded = save.recv_exit_status(), load.recv_exit_status()
        problems = [cut, f"docker save on {source.name} exited {saved}: {_stderr(save)}" if saved else "",
                    f"docker load on {target.name} exited {loaded}: {_stderr(load)}" if loaded else ""]
    finally:
        save.close()
        load.close()
    if any(problems):
        raise ShareError("; ".join(problem for problem in problems if problem) + "; nothing was loaded")
    return moved


def _stderr(channel: Any) -> str:
    text = b""
    while channel.recv_stderr_ready():
        text += channel.recv_stderr(CHUNK)
    lines = text.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else "no message"
