"""The engine's API key: where it lives on the rig, and how the engine and rigforge's clients get it.

The key lives in one file, ``/etc/rigforge/secrets/engine-api-key`` (the key alone on one line, 0600 root, its
folder 0700), and every reader reads that file itself, on the rig: nothing carries the key on a command line
(``ps`` shows every process's argv to every user) or in an environment (``/proc/PID/environ``, inherited by
every child, and for a container kept in Docker's own config and shown by ``docker inspect``).

- llama.cpp (native): the launcher gets ``--api-key-file PATH`` and puts the key into xllamacpp's
  ``CommonParams.api_keys`` (``rigforge/remote/llama_launcher.py``).
- vLLM, SGLang (containers): the key file and ``engine_entry.py`` are mounted read-only into the container, and
  the container runs ``python3 /opt/rigforge/engine_entry.py --api-key-file PATH -m MODULE FLAGS…`` instead of
  ``python3 -m MODULE FLAGS…``: the entry reads the key and runs the module as ``python -m`` would with
  ``--api-key KEY`` added to its ``sys.argv`` inside the process (``rigforge/remote/engine_entry.py``). SGLang
  reads no environment variable for its key, and both engines log the arguments they parsed: the entry masks
  the key in every line the engine's main process logs or prints.
- The bench client (``api_key_file`` in its config), the verify suite and the e2e tests read the file on the rig
  and send ``Authorization: Bearer <key>``. The health wait sends nothing: ``/health`` answers without a key on
  all three engines (llama.cpp's public endpoints, vLLM's and SGLang's auth middleware skip it).

Example::

    if needs_api_key(profile):
        lines.append(launcher_key_flag())
"""

from __future__ import annotations

import shlex

from rigforge.profile import Profile
from rigforge.profile.access import key_required

#: The rig's secrets folder (0700 root): the engine's API key, and beside it the Hugging Face token
#: (roles/weights.py); rigforge/operations/secrets.py writes into it.
SECRETS_DIR = "/etc/rigforge/secrets"
#: The key, alone on one line; written by rigforge (roles/api_key.py) from the controller or made on the rig.
KEY_FILE = f"{SECRETS_DIR}/engine-api-key"
#: Where the engine's container sees the key file (read-only) and rigforge's entry script.
CONTAINER_KEY_FILE = "/run/rigforge/engine-api-key"
CONTAINER_ENTRY = "/opt/rigforge/engine_entry.py"
ENTRY_SCRIPT = "engine_entry.py"
#: The key given on the machine running pyinfra: this environment variable, or the file named by host data.
CONTROLLER_VARIABLE = "RIGFORGE_API_KEY"
HOST_DATA_FILE = "api_key_file"
#: What the run prints so the owner can find the key (the key itself is never printed).
SHOW_COMMAND = f"sudo cat {KEY_FILE}"


class KeyedCommandError(ValueError):
    """The engine's command cannot take the key without putting it on its command line."""


def needs_api_key(profile: Profile) -> bool:
    """Whether the profile's engine must refuse requests without the key (``engine.auth``, ``engine.host``)."""
    return key_required(profile.engine.auth, profile.engine.host)


def launcher_key_flag() -> list[str]:
    """The native launcher's flag naming the key file (the launcher reads it; the key is not an argument)."""
    return ["--api-key-file", KEY_FILE]


def container_key_mounts(lib_dir: str) -> list[list[str]]:
    """``docker run`` flags that bring the key file and the entry script into the engine's container, read-only.

    ``--mount`` rather than ``-v``: a key file gone missing stops the container's start, where ``-v`` would make
    an empty directory in its place.
    """
    return [["--mount", f"type=bind,source={source},target={target},readonly"]
            for source, target in ((KEY_FILE, CONTAINER_KEY_FILE), (f"{lib_dir}/{ENTRY_SCRIPT}", CONTAINER_ENTRY))]


def keyed_command(command: list[str]) -> list[str]:
    """``[python, -m, module]`` run through the entry script, which hands the module the key in-process.

    >>> keyed_command(["python3", "-m", "sglang.launch_server"])[:4]
    ['python3', '/opt/rigforge/engine_entry.py', '--api-key-file', '/run/rigforge/engine-api-key']
    """
    if len(command) != 3 or command[1] != "-m":
        raise KeyedCommandError(
            f"engine.command {command} must be [python, -m, module] for the engine to get its API key without "
            "a command line that shows it (engine.auth); or serve it on loopback (engine.host: 127.0.0.1)")
    return [command[0], CONTAINER_ENTRY, "--api-key-file", CONTAINER_KEY_FILE, *command[1:]]


def bearer_header_command(key_file: str = KEY_FILE) -> str:
    """A shell command printing ``Authorization: Bearer <key>`` from the key file, for ``curl -H @-``.

    The key goes from the file through a pipe into curl: it is in no process's argv or environment.
    Example: ``f"{bearer_header_command()} | curl -fsS -H @- http://127.0.0.1:8000/v1/models"``
    """
    return f"sed -n '1s/^/Authorization: Bearer /p' {shlex.quote(key_file)}"
