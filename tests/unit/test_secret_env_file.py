"""Secret files (rigforge/operations/secrets.py), written for real through pyinfra's @local connector into a temp
folder: the Hugging Face token file, and the engine's API key (given here, or made on the rig and kept).

A secret must land with mode 0600 in a 0700 folder and never show in pyinfra's output, even at -vv (which
prints every command) or in the --json plan; a second run changes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hf_secret_value_that_must_not_leak_42"


def run_local(deploy: Path, *args: str, token: str | None = TOKEN,
              variable: str = "HF_TOKEN") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop(variable, None)
    if token is not None:
        env[variable] = token
    return subprocess.run([sys.executable, "-m", "pyinfra", *args, "@local", str(deploy)], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def write_deploy(tmp_path: Path, dest: Path) -> Path:
    deploy = tmp_path / "deploy.py"
    deploy.write_text(
        "from rigforge.operations.secrets import secret_env_file\n"
        f"secret_env_file(name='token', dest={str(dest)!r}, variable='HF_TOKEN')\n"
    )
    return deploy


def test_token_file_private_quiet_and_idempotent(tmp_path: Path) -> None:
    dest = tmp_path / "secrets" / "hf.env"
    deploy = write_deploy(tmp_path, dest)
    first = run_local(deploy, "-y", "-vv")
    assert first.returncode == 0, first.stderr
    assert dest.read_text() == f"HF_TOKEN={TOKEN}\n"
    assert (dest.stat().st_mode & 0o777, dest.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    plan = run_local(deploy, "--dry", "--json", "--diff", "-vv")
    assert plan.returncode == 0, plan.stderr
    document = json.loads(plan.stdout[plan.stdout.index("{"):])
    assert [op["hosts_with_change"] for op in document["plan"]] == [[]]
    for output in (first.stdout, first.stderr, plan.stdout, plan.stderr):
        assert TOKEN not in output


def test_without_a_token_nothing_is_written(tmp_path: Path) -> None:
    dest = tmp_path / "secrets" / "hf.env"
    done = run_local(write_deploy(tmp_path, dest), "-y", token=None)
    assert done.returncode == 0, done.stderr
    assert not dest.exists()
    assert f"no HF_TOKEN given on this machine: {dest} not written" in done.stdout + done.stderr


def test_without_a_token_a_later_run_keeps_the_file_and_says_so(tmp_path: Path) -> None:
    dest = tmp_path / "secrets" / "hf.env"
    deploy = write_deploy(tmp_path, dest)
    assert run_local(deploy, "-y").returncode == 0
    again = run_local(deploy, "-y", token=None)
    assert again.returncode == 0, again.stderr
    assert dest.read_text() == f"HF_TOKEN={TOKEN}\n"
    # At the default verbosity: a run without the token must not look like one that checked it.
    assert f"no HF_TOKEN given on this machine: {dest} left as it is" in again.stdout + again.stderr


def test_a_changed_token_replaces_the_file(tmp_path: Path) -> None:
    dest = tmp_path / "secrets" / "hf.env"
    deploy = write_deploy(tmp_path, dest)
    assert run_local(deploy, "-y").returncode == 0
    assert run_local(deploy, "-y", token="hf_rotated").returncode == 0
    assert dest.read_text() == "HF_TOKEN=hf_rotated\n"


KEY = "given-api-key-that-must-not-leak-7"


def write_key_deploy(tmp_path: Path, dest: Path) -> Path:
    deploy = tmp_path / "key_deploy.py"
    deploy.write_text(
        "from rigforge.operations.secrets import rig_secret_file\n"
        f"rig_secret_file(name='key', dest={str(dest)!r}, variable='RIGFORGE_API_KEY', show='sudo cat {dest}')\n"
    )
    return deploy


def run_key(deploy: Path, *args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_local(deploy, *args, token=key, variable="RIGFORGE_API_KEY")


def planned_changes(deploy: Path, key: str | None = None) -> list[list[str]]:
    plan = run_key(deploy, "--dry", "--json", "--diff", "-vv", key=key)
    assert plan.returncode == 0, plan.stderr
    return [op["hosts_with_change"] for op in json.loads(plan.stdout[plan.stdout.index("{"):])["plan"]]


def test_without_a_key_one_is_made_on_the_rig_kept_and_never_printed(tmp_path: Path) -> None:
    dest = tmp_path / "secrets" / "engine-api-key"
    deploy = write_key_deploy(tmp_path, dest)
    made = run_key(deploy, "-y", "-vv")
    assert made.returncode == 0, made.stderr
    key = dest.read_text()
    assert len(key) == 65 and key.endswith("\n") and set(key[:-1]) <= set("0123456789abcdef"), "not 256 bits in hex"
    assert (dest.stat().st_mode & 0o777, dest.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    assert not list(dest.parent.glob("*.rigforge-new"))
    assert f"a new key made on the rig in {dest}, never sent or printed (show it on the rig with: sudo cat {dest})" \
        in made.stdout + made.stderr
    again = run_key(deploy, "-y", "-vv")
    assert dest.read_text() == key, "a second run replaced the key"
    assert f"no RIGFORGE_API_KEY given on this machine: {dest} kept as it is" in again.stdout + again.stderr
    assert planned_changes(deploy) == [[]]
    for output in (made.stdout, made.stderr, again.stdout, again.stderr):
        assert key.strip() not in output


def test_a_given_key_replaces_the_made_one_once(tmp_path: Path) -> None:
    dest = tmp_path / "secrets" / "engine-api-key"
    deploy = write_key_deploy(tmp_path, dest)
    assert run_key(deploy, "-y").returncode == 0
    given = run_key(deploy, "-y", "-vv", key=KEY)
    assert given.returncode == 0, given.stderr
    assert dest.read_text() == f"{KEY}\n" and dest.stat().st_mode & 0o777 == 0o600
    assert planned_changes(deploy, key=KEY) == [[]]
    assert KEY not in given.stdout + given.stderr
    assert f"{dest}: the key from RIGFORGE_API_KEY on this machine" in given.stdout + given.stderr


def test_a_key_file_opened_to_others_is_closed_again(tmp_path: Path) -> None:
    dest = tmp_path / "secrets" / "engine-api-key"
    deploy = write_key_deploy(tmp_path, dest)
    assert run_key(deploy, "-y").returncode == 0
    key = dest.read_text()
    dest.chmod(0o644)
    assert planned_changes(deploy) == [["@local"]]
    assert run_key(deploy, "-y").returncode == 0
    assert dest.stat().st_mode & 0o777 == 0o600 and dest.read_text() == key
