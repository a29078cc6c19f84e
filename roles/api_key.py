"""The engine's API key on the rig, for the service role: the key file and its reader, and what the engine starts from.

When the profile's engine needs a key (``engine.auth``, ``engine.host``: rigforge/serving/api_key.py), the key file
``/etc/rigforge/secrets/engine-api-key`` holds the key given on this machine (``RIGFORGE_API_KEY``, or the
first line of the file named by host data ``api_key_file``), or one made on the rig once and kept; and
``/opt/rigforge/lib/engine_entry.py``, the reader the engine starts through, is installed. Both are inputs of
the engine: a new key, or a new reader, restarts it once.

Example (inside the service role, before the unit)::

    serve_api_key(profile)
    inputs.update(api_key_inputs(profile))
"""

from __future__ import annotations

import hashlib
import os

from pyinfra import host

from rigforge.operations.secrets import rig_secret_file
from rigforge.profile import Profile
from rigforge.serving.api_key import (
    CONTROLLER_VARIABLE,
    ENTRY_SCRIPT,
    HOST_DATA_FILE,
    KEY_FILE,
    SHOW_COMMAND,
    needs_api_key,
)
from rigforge.serving.engines import REMOTE_LIB_DIR
from roles.weights import remote_script_text, upload_remote_script

ENTRY_PATH = f"{REMOTE_LIB_DIR}/{ENTRY_SCRIPT}"
KEY_OPERATION = f"Engine API key in {KEY_FILE}"


def serve_api_key(profile: Profile) -> None:
    """The key file and the engine's key reader, when the profile's engine needs a key; nothing otherwise."""
    if not needs_api_key(profile):
        if os.environ.get(CONTROLLER_VARIABLE) or host.data.get(HOST_DATA_FILE):
            host.log(f"{CONTROLLER_VARIABLE} given, but the engine asks for no key (engine.host "
                     f"{profile.engine.host}, engine.auth {profile.engine.auth.mode}): not used")
        return
    rig_secret_file(name=KEY_OPERATION, dest=KEY_FILE, variable=CONTROLLER_VARIABLE, show=SHOW_COMMAND,
                    local_file=host.data.get(HOST_DATA_FILE))
    upload_remote_script(profile, ENTRY_SCRIPT)


def api_key_inputs(profile: Profile) -> dict[str, str]:
    """What the engine starts from beside its unit, known here: the reader's text (by sha256)."""
    if not needs_api_key(profile):
        return {}
    return {ENTRY_PATH: hashlib.sha256(remote_script_text(profile, ENTRY_SCRIPT).encode()).hexdigest()}


def api_key_watched_files(profile: Profile) -> list[str]:
    """Files on the rig the engine reads at start for its key (their sha256 is an input)."""
    return [KEY_FILE] if needs_api_key(profile) else []
