"""The engine's key entry in a real container, started with the mounts and command the GPU engine units render.

Real: Docker, its ``--mount`` binds (the key file root's and 0600, read-only in the container), the entry
(rigforge/remote/engine_entry.py) and ``docker inspect``. STAND-INS, because vLLM and SGLang need GPUs: the
engine module (tests/standins/api_engine.py: parses ``--api-key``, logs its arguments, starts a ``spawn``
worker) and the image (the sandbox's Debian 12 with its python3, not an engine image).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from rigforge.sandbox.docker import docker
from rigforge.serving.api_key import CONTAINER_ENTRY, CONTAINER_KEY_FILE, container_key_mounts, keyed_command
from tests.e2e.conftest import Sandbox

ROOT = Path(__file__).resolve().parents[2]
KEY = "container-key-that-must-stay-in-its-file-91d3"
REPORT = "/srv/out/report.json"


@pytest.fixture()
def mounted(tmp_path: Path) -> Path:
    """A rig's folders in small: the secrets folder (0700) with the key (0600), the lib folder, the stand-in."""
    secrets, lib, engine, out = (tmp_path / name for name in ("secrets", "lib", "engine/standin", "out"))
    for folder in (secrets, lib, engine, out):
        folder.mkdir(parents=True)
    secrets.chmod(0o700)
    key = secrets / "engine-api-key"
    key.write_text(KEY + "\n")
    key.chmod(0o600)
    shutil.copy(ROOT / "rigforge" / "remote" / "engine_entry.py", lib / "engine_entry.py")
    shutil.copy(ROOT / "tests" / "standins" / "api_engine.py", engine / "serve.py")
    (engine / "__init__.py").write_text("")
    return tmp_path


def engine_run(sandbox: Sandbox, root: Path, name: str) -> list[str]:
    """``docker run`` as the unit has it: the key's mounts (their sources moved into ``root``) and the entry."""
    mounts = [word.replace("source=/etc/rigforge/secrets", f"source={root}/secrets")
              .replace("source=/opt/rigforge/lib", f"source={root}/lib")
              for line in container_key_mounts("/opt/rigforge/lib") for word in line]
    command = keyed_command(["python3", "-m", "standin.serve"])
    return ["run", "--name", name, *mounts, "-v", f"{root}/engine:/srv/engine:ro", "-v", f"{root}/out:/srv/out",
            "-e", "PYTHONPATH=/srv/engine", "--entrypoint", command[0], sandbox.image, *command[1:],
            "--port", "8000", "--report", REPORT]


def test_the_engine_in_its_container_gets_the_key_and_nothing_shows_it(sandbox: Sandbox, mounted: Path) -> None:
    name = f"rigforge-entry-{sandbox.suffix}"
    try:
        done = docker(*engine_run(sandbox, mounted, name), check=False)
        config = json.loads(docker("inspect", name).stdout)[0]
    finally:
        docker("rm", "-f", name, check=False)
    assert done.returncode == 0, done.stderr
    seen = json.loads((mounted / "out" / "report.json").read_text())
    assert seen["key_sha256"] == hashlib.sha256(KEY.encode()).hexdigest()
    assert not (seen["cmdline_has_key"] or seen["environ_has_key"] or seen["key_in_os_environ"]), seen
    assert seen["child"] == {"cmdline": False, "environ": False}, seen
    assert KEY not in done.stdout + done.stderr and "<api-key>" in done.stdout
    # What Docker keeps and shows of the container names the file, never the key.
    assert KEY not in json.dumps(config)
    assert {(mount["Source"], mount["Destination"], mount["RW"]) for mount in config["Mounts"]} >= {
        (f"{mounted}/secrets/engine-api-key", CONTAINER_KEY_FILE, False),
        (f"{mounted}/lib/engine_entry.py", CONTAINER_ENTRY, False)}


def test_a_missing_key_file_stops_the_container_instead_of_becoming_a_folder(sandbox: Sandbox,
                                                                             mounted: Path) -> None:
    os.remove(mounted / "secrets" / "engine-api-key")
    name = f"rigforge-entry-{sandbox.suffix}"
    try:
        done = docker(*engine_run(sandbox, mounted, name), check=False)
    finally:
        docker("rm", "-f", name, check=False)
    assert done.returncode != 0 and "bind source path does not exist" in done.stderr, done.stderr
    assert not (mounted / "secrets" / "engine-api-key").exists()
