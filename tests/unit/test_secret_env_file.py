"""The Hugging Face token file, written for real through pyinfra's @local connector into a temp folder.

The token must land with mode 0600 in a 0700 folder and never show in pyinfra's output, even at -vv
(which prints every command) or in the --json plan; a second run changes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hf_secret_value_that_must_not_leak_42"


def run_local(deploy: Path, *args: str, token: str | None = TOKEN) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("HF_TOKEN", None)
    if token is not None:
        env["HF_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "pyinfra", *args, "@local", str(deploy)], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def write_deploy(tmp_path: Path, dest: Path) -> Path:
    deploy = tmp_path / "deploy.py"
    deploy.write_text(
        "from rigforge.operations.weights import secret_env_file\n"
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
