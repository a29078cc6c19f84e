"""How each inference engine is launched: the argv of its process, grouped one flag per line.

Python decides the words; ``templates/service/rigforge-engine.service.j2`` only lays them out. Every word
that reaches the unit file goes through ``systemd_quote``, so a profile value can never split into two
arguments, expand a variable or a ``%`` specifier.

Example::

    lines = exec_start_lines(launch_command(profile))   # ["/usr/bin/docker run", "--rm", ...]
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from rigforge.profile import Profile
from rigforge.profile.recipes import RIGFORGE_FLAGS
from rigforge.remote.llama_launcher import LAUNCHER_FLAGS
from rigforge.render import flag_value
from rigforge.serving.api_key import (
    KeyedCommandError,
    container_key_mounts,
    keyed_command,
    launcher_key_flag,
    needs_api_key,
)

UNIT_NAME = "rigforge-engine.service"
CONTAINER_NAME = "rigforge-engine"
DOCKER = "/usr/bin/docker"
#: Written by the nccl role (plain KEY=VALUE lines, read by both systemd and ``docker --env-file``).
ENGINE_ENV_FILE = "/etc/rigforge/engine.env"
REMOTE_LIB_DIR = "/opt/rigforge/lib"
LLAMA_VENV = "/opt/rigforge/llama-venv"
LAUNCHER_PATH = f"{REMOTE_LIB_DIR}/llama_launcher.py"

#: How each engine names the model, the name it serves it under, and the listen address.
_MODEL_FLAGS = RIGFORGE_FLAGS

_PLAIN_WORD = re.compile(r"[A-Za-z0-9_@+=:,./-]+")

Line = list[str]


class EngineConfigError(ValueError):
    """The profile asks for a launch the engine cannot take (e.g. a flag the launcher does not know)."""


def systemd_quote(word: Any) -> str:
    """Quote one argument for a unit file's ``ExecStart=``: double quotes, C escapes, ``$$`` and ``%%``.

    systemd expands ``$VAR`` and ``%x`` specifiers and unescapes backslashes even inside quotes, so
    POSIX single-quoting (``shlex.quote``) is not enough there.

    >>> systemd_quote('{"method":"mtp"}')
    '"{\\\\"method\\\\":\\\\"mtp\\\\"}"'
    """
    text = str(word)
    if _PLAIN_WORD.fullmatch(text):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def environment_lines(env: dict[str, str]) -> list[str]:
    """``Environment=`` values for a unit: one quoted ``KEY=value`` each (no ``$`` expansion happens there).

    >>> environment_lines({"A": "x y", "B": "50%"})
    ['"A=x y"', '"B=50%%"']
    """
    return ['"' + f"{key}={value}".replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%") + '"'
            for key, value in env.items()]


def engine_env_file_variables(profile: Profile) -> dict[str, str]:
    """What the nccl role writes to ``ENGINE_ENV_FILE``: the rig's ``nccl.env``, and ``NCCL_GRAPH_FILE`` when the
    graph XML is on. The engine's own ``engine.env`` (its recipe's) is not there: a container gets it with
    ``docker run -e`` after ``--env-file``, so it wins for that engine alone."""
    if profile.nccl is None:
        return {}
    variables = dict(profile.nccl.env)
    if profile.nccl.graph_xml:
        variables["NCCL_GRAPH_FILE"] = profile.nccl.graph_path
    return variables


def image_ref(profile: Profile) -> str | None:
    """The image the service runs (None for a native engine).

    ``engine.image`` as named, or the content-hashed tag the images role builds ``engine.build`` under
    (``rigforge.images.plans.image_ref``): a changed build gives a new tag, so the unit changes with it. A build's git
    refs enter that tag as the commits they resolved to on the rig being deployed (``rigforge.fleet.image_commits``:
    this run's decision for the rig, else its record), or as ``image_commits`` gives them; with neither (a unit
    rendered here) the refs stay as the profile names them.
    """
    if profile.engine.native is not None:
        return None
    from pyinfra.context import ctx_host

    from rigforge.images.plans import image_ref as container_image  # the build plan renders Dockerfile templates

    if profile.engine.build is None:
        return container_image(profile)
    if _GIVEN_COMMITS.get() is not None or not ctx_host.isset():
        return container_image(profile, _GIVEN_COMMITS.get())
    if _RIG_COMMITS is None:
        raise RuntimeError("image_ref in a deploy needs the rig's commits: import rigforge.fleet.image_commits "
                           "(rigforge.context does) before naming a built image")
    return container_image(profile, _RIG_COMMITS(ctx_host.get(), profile))


_GIVEN_COMMITS: ContextVar[Mapping[str, str] | None] = ContextVar("rigforge_image_commits", default=None)
#: How ``image_ref`` learns in a deploy which commits the rig's image is built from (host, profile -> commits).
#: rigforge.fleet.image_commits answers it from facts (this run's decision, else the rig's record) and sits
#: above this module, so it hands its reader down (``read_rig_commits_with``) instead of being imported here.
_RIG_COMMITS: Callable[[Any, Profile], Mapping[str, str]] | None = None


def read_rig_commits_with(reader: Callable[[Any, Profile], Mapping[str, str]]) -> None:
    """Let ``image_ref`` ask ``reader(host, profile)`` for a rig's commits during a deploy (set once, by
    rigforge.fleet.image_commits when it is imported)."""
    global _RIG_COMMITS
    _RIG_COMMITS = reader


@contextmanager
def image_commits(commits: Mapping[str, str]) -> Iterator[None]:
    """Within this block ``image_ref`` (and the unit, which names the image) takes the build's git refs at these
    commits: for code that renders what a rig runs without a deploy (the verify suite, from the rig's record).

    Example: ``with image_commits(record.commits): unit = render_unit(profile)``
    """
    token = _GIVEN_COMMITS.set(dict(commits))
    try:
        yield
    finally:
        _GIVEN_COMMITS.reset(token)


def model_location(profile: Profile) -> str:
    """What the engine is given as its model: the weights folder, or the GGUF file for llama.cpp."""
    model = profile.model
    if profile.engine.kind == "llama.cpp":
        if not model.files:
            raise EngineConfigError("llama.cpp needs model.files naming the GGUF file to serve")
        return f"{model.path}/{model.files[0].name}"
    return model.path


def flag_lines(flags: dict[str, Any]) -> list[Line]:
    """Profile flags as lines: ``true`` is a bare flag, ``false`` leaves it out, mappings become JSON."""
    lines: list[Line] = []
    for flag, value in flags.items():
        if value is True:
            lines.append([flag])
        elif value is not False:
            lines.append([flag, flag_value(value)])
    return lines


def engine_lines(profile: Profile) -> list[Line]:
    """The engine's own arguments: model, served name, listen address, then the profile's flags."""
    engine = profile.engine
    names = _MODEL_FLAGS[engine.kind]
    lines = [
        [names["model"], model_location(profile)],
        [names["name"], engine.served_model_name],
        [names["host"], engine.host],
        [names["port"], str(engine.port)],
    ]
    reserved = set(names.values())
    clashing = sorted(reserved & set(engine.flags))
    if clashing:
        raise EngineConfigError(
            f"engine.flags must not set {', '.join(clashing)}: they come from model.path, "
            "engine.served_model_name, engine.host and engine.port"
        )
    return lines + flag_lines(engine.flags)


def native_lines(profile: Profile) -> list[Line]:
    """The llama.cpp launcher run from the engine venv, with the native server's sizing."""
    native = profile.engine.native
    if native is None or profile.engine.kind != "llama.cpp":
        raise EngineConfigError("only llama.cpp runs natively (engine.native)")
    unknown = sorted(set(profile.engine.flags) - set(LAUNCHER_FLAGS))
    if unknown:
        raise EngineConfigError(
            f"engine.flags {', '.join(unknown)} are not known to the llama.cpp launcher "
            f"(known: {', '.join(sorted(LAUNCHER_FLAGS))})"
        )
    check_chat_template_flags(profile.engine.flags)
    return [
        [f"{LLAMA_VENV}/bin/python", LAUNCHER_PATH],
        *engine_lines(profile)[:4],
        ["--threads", str(native.threads)],
        ["--parallel", str(native.parallel)],
        ["--ctx-size", str(native.context)],
        *flag_lines(profile.engine.flags),
        *([launcher_key_flag()] if needs_api_key(profile) else []),
    ]


def check_chat_template_flags(flags: dict[str, Any]) -> None:
    """A llama.cpp built-in template name (``--chat-template: gemma``) needs ``--no-jinja: true``.

    With Jinja on, llama.cpp takes the value as a Jinja template's text, so a name renders as itself: every
    chat prompt becomes the word ``gemma`` (seen on xllamacpp 2026.10.11549's /apply-template).
    """
    template = flags.get("--chat-template")
    if isinstance(template, str) and "{" not in template and flags.get("--no-jinja") is not True:
        raise EngineConfigError(
            f"engine.flags --chat-template {template!r} names a llama.cpp built-in template, which applies only "
            "with --no-jinja: true (with Jinja on, llama.cpp would send the name itself as every chat prompt); "
            "add --no-jinja: true, or give the template's Jinja text"
        )


def container_lines(profile: Profile, name: str = CONTAINER_NAME,
                    extra_volumes: dict[str, str] | None = None) -> list[Line]:
    """``docker run`` up to the image: the seed flags (rig-facts §1.8), env file, volumes — the engine's container.

    + profile: the rig's profile (a container engine)
    + name: container name (the engine's, or e.g. the interconnect probe's)
    + extra_volumes: more read-only mounts, host path -> container path
    """
    docker = profile.engine.docker
    image = image_ref(profile)
    if docker is None or image is None:
        raise EngineConfigError("container engines need engine.docker and an image (engine.image or engine.build)")
    model_dir = profile.model.path
    lines: list[Line] = [
        [DOCKER, "run"],
        ["--rm"],
        ["--name", name],
        # Never pull at service start: the engine role put the image there; a missing one is an error.
        ["--pull", "never"],
        ["--gpus", docker.gpus if docker.gpus == "all" else f'"{docker.gpus}"'],
        [f"--ipc={docker.ipc}"],
        [f"--shm-size={docker.shm_size}"],
        *[["--ulimit", f"{ulimit}={limit}"] for ulimit, limit in docker.ulimits.items()],
        [f"--network={docker.network}"],
        ["--env-file", ENGINE_ENV_FILE],
        *[["-e", f"{key}={value}"] for key, value in profile.engine.env.items()],
        *[["-v", f"{source}:{target}"] for source, target in docker.volumes.items()],
        ["-v", f"{model_dir}:{model_dir}:ro"],
    ]
    if profile.nccl is not None and profile.nccl.graph_xml:
        lines.append(["-v", f"{profile.nccl.graph_path}:{profile.nccl.graph_path}:ro"])
    lines += [["-v", f"{source}:{target}:ro"] for source, target in (extra_volumes or {}).items()]
    return [*lines, [image]]


def docker_lines(profile: Profile) -> list[Line]:
    """The engine's container: ``docker run`` flags, the image, the engine command and its flags.

    With an API key (rigforge/serving/api_key.py) the key file and the entry script are mounted read-only, and the
    entry runs the engine's module with the key.
    """
    keyed = needs_api_key(profile)
    *lines, image = container_lines(profile)
    lines += container_key_mounts(REMOTE_LIB_DIR) if keyed else []
    command = list(profile.engine.command)
    try:
        command = keyed_command(command) if keyed else command
    except KeyedCommandError as error:
        raise EngineConfigError(str(error)) from None
    return [*lines, image, *([command] if command else []), *engine_lines(profile)]


def launch_command(profile: Profile) -> list[Line]:
    """The full argv of the engine process, one line per flag (with its value)."""
    if profile.engine.native is not None:
        return native_lines(profile)
    return docker_lines(profile)


def launch_argv(profile: Profile) -> list[str]:
    """The argv as one flat list (what the process receives)."""
    return [word for line in launch_command(profile) for word in line]


def exec_start_lines(lines: list[Line]) -> list[str]:
    """Each line's words quoted for ``ExecStart=``; the template joins them with line continuations."""
    return [" ".join(systemd_quote(word) for word in line) for line in lines]


def health_url(profile: Profile) -> str:
    """Where the service role polls after a (re)start; a server bound to all interfaces is asked locally."""
    host = "127.0.0.1" if profile.engine.host == "0.0.0.0" else profile.engine.host
    return f"http://{host}:{profile.engine.port}/health"
