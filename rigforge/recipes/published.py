"""A published launch command line next to the one rigforge renders for a recipe, item by item.

Both sides become a ``Launch``: docker options (``-v`` keyed by the container path, ``--ulimit`` by its name),
environment (``-e``, ``export`` lines, and on rigforge's side the env file the unit reads), image, engine command,
engine flags. ``differences`` lists every item whose value differs between them, keyed the way a recipe's
``differences`` declares them: the flag (``--port``), the docker option (``--shm-size``, ``-v /cache/jit``), the
variable (``NCCL_P2P_DISABLE``), ``image``, ``command``, or ``docker`` for a published command run without
Docker. rigforge's own launch frame — what every unit it writes carries for its own bookkeeping — is in
``FRAME`` with the reason, so no recipe has to repeat it.

Example::

    published = published_launch(QUOTED_COMMAND)
    rendered = rendered_launch(profile.with_recipe("k64-published"))
    undeclared = set(differences(published, rendered)) - set(recipe.differences) - set(FRAME)
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

from rigforge.profile import Profile
from rigforge.serving.api_key import CONTAINER_ENTRY, CONTAINER_KEY_FILE
from rigforge.serving.engines import ENGINE_ENV_FILE, engine_env_file_variables, launch_argv

#: What rigforge adds to every engine container it runs, and why: not a recipe's difference.
FRAME = {
    "--rm": "the unit starts a fresh container each time; nothing of a stopped one is kept",
    "--name": "the container is rigforge-engine, the name the unit removes before a start and stops",
    "--pull": "never pull at service start: the images role put the image there (a missing one is an error)",
    "--env-file": f"the rig's NCCL variables come from {ENGINE_ENV_FILE} (counted in the environment here)",
    "-v <model.path>": "the checkpoint rigforge fetched, mounted read-only at the same path",
    f"--mount {CONTAINER_KEY_FILE}": "the engine's API key file, read-only (engine.auth: never argv or environment)",
    f"--mount {CONTAINER_ENTRY}": "the entry that hands the engine its API key inside its process (api_key.py)",
    "api-key entry": f"the engine's module runs through {CONTAINER_ENTRY} (python3 ENTRY --api-key-file F -m M)",
}
#: docker run options that take a value (``--opt value`` or ``--opt=value``); the others are bare.
DOCKER_VALUED = {"--gpus", "--ipc", "--shm-size", "--network", "--net", "--ulimit", "-v", "--volume", "-e", "--env",
                 "--env-file", "--name", "-p", "--publish", "--restart", "--pull", "--entrypoint", "-w", "--user",
                 "--mount"}
_ASSIGNMENT = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


@dataclass
class Launch:
    """One launch command, item by item (values as text; bare flags and options as "")."""

    docker: dict[str, str] | None = None  # None: no container
    env: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    command: tuple[str, ...] = ()
    flags: dict[str, str] = field(default_factory=dict)


def _docker_key(option: str, value: str) -> tuple[str, str]:
    """Repeatable options keyed by what they set: ``-v`` by the container path, ``--ulimit`` by its name."""
    if option in ("-v", "--volume"):
        source, _, rest = value.partition(":")
        target = rest.split(":", 1)[0]
        return f"-v {target}", source
    if option == "--ulimit":
        name, _, limit = value.partition("=")
        return f"--ulimit {name}", limit
    if option == "--mount":
        fields = dict(item.partition("=")[::2] for item in value.split(","))
        return f"--mount {fields.get('target') or fields.get('destination') or fields.get('dst')}", value
    return {"--net": "--network", "--publish": "-p", "--env": "-e"}.get(option, option), value


def _engine_flags(words: list[str]) -> dict[str, str]:
    """``--flag value`` / ``--flag=value`` / bare ``--flag``; a first bare word is the model (``vllm serve M``)."""
    flags: dict[str, str] = {}
    index = 0
    if words and not words[0].startswith("-"):
        flags["--model"] = words[0]
        index = 1
    while index < len(words):
        word = words[index]
        flag, equals, value = word.partition("=")
        if equals:
            flags[flag] = value
        elif index + 1 < len(words) and not words[index + 1].startswith("--"):
            flags[word] = words[index + 1]
            index += 1
        else:
            flags[word] = ""
        index += 1
    return flags


def parse_launch(words: list[str], env: dict[str, str] | None = None) -> Launch:
    """A launch from an argv: ``docker run OPTIONS IMAGE COMMAND FLAGS`` or ``COMMAND FLAGS``.

    + words: the argv, without environment assignments in front
    + env: variables set outside the argv (export lines, an env file)
    """
    launch = Launch(env=dict(env or {}))
    if len(words) >= 2 and words[0].endswith("docker") and words[1] == "run":
        launch.docker = {}
        index = 2
        while index < len(words) and words[index].startswith("-"):
            option, equals, value = words[index].partition("=")
            if not equals and option in DOCKER_VALUED:
                index += 1
                value = words[index]
            if option in ("-e", "--env"):
                name, _, assigned = value.partition("=")
                launch.env[name] = assigned
            else:
                key, shown = _docker_key(option, value)
                launch.docker[key] = shown
            index += 1
        launch.image = words[index]
        words = words[index + 1:]
        if words[1:3] == [CONTAINER_ENTRY, "--api-key-file"]:  # the API key's entry: the module it runs counts
            launch.docker["api-key entry"] = " ".join(words[1:4])
            words = [words[0], *words[4:]]
    command_end = next((i for i, word in enumerate(words) if word.startswith("--")), len(words))
    command = words[:command_end]
    if command[:2] == ["vllm", "serve"] and len(command) > 2:  # `vllm serve MODEL`: the model is an argument
        command, words = command[:2], [*command[2:], *words[command_end:]]
        command_end = 0
    launch.command = tuple(command)
    launch.flags = _engine_flags(words[command_end:] if command_end else words)
    return launch


def published_launch(text: str) -> Launch:
    """A launch from a command as a post shows it: ``export A=B`` lines, backslash continuations, shell quoting
    (a ``docker pull`` line before the run is skipped)."""
    env: dict[str, str] = {}
    words: list[str] = []
    for line in text.replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "docker pull ")):
            continue
        if assignment := _ASSIGNMENT.match(line):
            env[assignment.group(1)] = shlex.split(assignment.group(2))[0] if assignment.group(2) else ""
            continue
        words += shlex.split(line)
    return parse_launch(words, env)


def rendered_launch(profile: Profile, env_file: dict[str, str] | None = None) -> Launch:
    """What rigforge runs for ``profile``: its unit's argv, with the engine env file's variables.

    + env_file: the variables the env file holds on the rig (default: what the nccl role writes there)
    """
    variables = dict(env_file if env_file is not None else engine_env_file_variables(profile))
    launch = parse_launch(launch_argv(profile), variables)
    if launch.docker is not None:
        model = f"-v {profile.model.path}"
        if model in launch.docker:
            launch.docker["-v <model.path>"] = launch.docker.pop(model)
    return launch


def _same(one: str | None, two: str | None) -> bool:
    if one == two:
        return True
    if one is None or two is None:
        return False
    for load in (json.loads, float):
        try:
            return load(one) == load(two)
        except ValueError:
            continue
    return False


def _spelled_as(flag: str, rendered: dict[str, str]) -> str:
    """A published flag under rigforge's spelling when it is argparse's abbreviation of exactly one rendered flag
    (``--speculative-algo`` for ``--speculative-algorithm``, SGLang's ``--model`` for ``--model-path``)."""
    if flag in rendered:
        return flag
    longer = [name for name in rendered if name.startswith(flag)]
    return longer[0] if len(longer) == 1 else flag


def differences(published: Launch, rendered: Launch) -> dict[str, tuple[str | None, str | None]]:
    """Every item whose value differs: key -> (published value, rendered value); None where one side lacks it."""
    found: dict[str, tuple[str | None, str | None]] = {}
    if (published.docker is None) != (rendered.docker is None):
        found["docker"] = ("none" if published.docker is None else "docker run", "none" if rendered.docker is None
                           else "docker run")
    elif published.docker is not None and rendered.docker is not None:
        for key in sorted(set(published.docker) | set(rendered.docker)):
            one, two = published.docker.get(key), rendered.docker.get(key)
            if not _same(one, two):
                found[key] = (one, two)
    if published.docker is not None and rendered.docker is not None and published.image != rendered.image:
        found["image"] = (published.image, rendered.image)
    if published.command != rendered.command:
        found["command"] = (" ".join(published.command), " ".join(rendered.command))
    flags = {_spelled_as(flag, rendered.flags): value for flag, value in published.flags.items()}
    for group_one, group_two in ((published.env, rendered.env), (flags, rendered.flags)):
        for key in sorted(set(group_one) | set(group_two)):
            one, two = group_one.get(key), group_two.get(key)
            if not _same(one, two):
                found[key] = (one, two)
    return found
