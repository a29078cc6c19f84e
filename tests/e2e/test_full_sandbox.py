"""The main job on the sandbox rig, for real: deploys/full.py on a fresh Debian 12 systemd host.

A dry run with --diff first (it must show every file and change nothing), then the real run, then a second
plan that must show zero changes, then the testinfra verify suite against the host.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pyinfra_run import REPO_ROOT, assert_no_changes, run_pyinfra

from rigforge.sandbox import exec_in
from rigforge.sandbox.model import ensure_gemma

SNAPSHOT = "find /etc -xdev -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum; dpkg -l | sha256sum"


@pytest.fixture(scope="module")
def rig(sandbox, tmp_path_factory: pytest.TempPathFactory):
    # The sandbox profile uploads the real Gemma model from here (model.source: local).
    ensure_gemma(REPO_ROOT / ".sandbox" / "models")
    host = sandbox.fresh_host("full")
    inventory = sandbox.write_inventory(tmp_path_factory.mktemp("full") / "inventory.py", [host])
    before = exec_in(host, SNAPSHOT).stdout
    dry = run_pyinfra(inventory, "deploys/full.py", "--diff", dry=True)
    after_dry = exec_in(host, SNAPSHOT).stdout
    first = run_pyinfra(inventory, "deploys/full.py")
    return host, inventory, before, dry, after_dry, first


def test_dry_run_changes_nothing_and_diffs_every_file(rig) -> None:
    _, _, before, dry, after_dry, _ = rig
    assert before == after_dry, "a --dry run changed /etc or the installed packages"
    assert "Will create /etc/rigforge/profile.json" in dry.stderr
    assert '"profile_hash"' in dry.stderr, "the diff does not show the file's content"


def test_full_deploy_then_zero_changes(rig) -> None:
    _, inventory, _, _, _, first = rig
    assert first.returncode == 0
    assert_no_changes(inventory, "deploys/full.py")


def test_verify_suite_passes(rig, sandbox) -> None:
    host = rig[0]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--hosts=paramiko://{host.name}",
         f"--ssh-config={Path(sandbox.state_dir) / 'ssh_config'}", "tests/verify"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
