"""A sudoer instead of root, on a real sandbox host: the full deploy, zero changes again, and the verify suite.

The host gets a user ``deploy`` with the test key in its authorized_keys, first with passwordless sudo
(``NOPASSWD``), then with a sudo password given the pyinfra way (``_sudo_password`` host data, read by the
inventory from the environment so it is on no command line of the machine running pyinfra). Inventories are
written with ``rig_host`` exactly as in inventory/rig2x.py; only the address is a sandbox stand-in.

The weights come from the Hub with a canary Hugging Face token, searched for everywhere after the deploy as
in tests/e2e/test_hf_token.py (the Hub is a STAND-IN served inside the host, tests/standins/hf_hub.py: the
real one is unreachable here): as a sudoer the token file also passes through the staging folder.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pyinfra_run import REPO_ROOT, assert_no_changes, run_pyinfra
from token_canary import (
    assert_canaries_only_in_their_files,
    canary_env,
    deploy_with_canaries,
    hf_canary,
    hub_model,
    serve_hub_in_host,
)

from rigforge.operations.files import UPLOAD_STAGING_DIR
from rigforge.sandbox import SandboxHost, exec_in
from rigforge.sandbox.model import ensure_gemma

USER = "deploy"
PASSWORD_ENV = "RIGFORGE_TEST_SUDO_PASSWORD"
# A test fixture's password for a throwaway sandbox user, never a real one.
PASSWORD = "s3cret-sandbox-only-7Qx"


def add_sudo_user(host: SandboxHost, public_key: str, password: str | None = None) -> None:
    """Create ``deploy`` with ``public_key`` authorised; sudo without a password, or with ``password``."""
    sudoers = f"{USER} ALL=(ALL) ALL" if password else f"{USER} ALL=(ALL) NOPASSWD:ALL"
    script = (
        f"set -e; id {USER} >/dev/null 2>&1 || useradd -m -s /bin/bash {USER}\n"
        f"install -d -m 700 -o {USER} -g {USER} /home/{USER}/.ssh\n"
        f"install -m 600 -o {USER} -g {USER} /dev/stdin /home/{USER}/.ssh/authorized_keys\n"
        f"echo '{sudoers}' > /etc/sudoers.d/{USER}.new && chmod 440 /etc/sudoers.d/{USER}.new\n"
        f"visudo -cqf /etc/sudoers.d/{USER}.new && mv /etc/sudoers.d/{USER}.new /etc/sudoers.d/{USER}\n"
    )
    if password:
        script += f"echo '{USER}:{password}' | chpasswd\n"
    proc = exec_in(host, ["bash", "-c", script], input_text=public_key)
    assert proc.returncode == 0, proc.stderr


#: This module proves sudo, not speed: one bench cell, and a floor that only a stalled server misses (the
#: sandbox profile's stall guard).
BENCH = {"concurrency": [1], "floors": [{"concurrency": 1, "input_tokens": 128, "min_output_tps": 0.05,
                                         "min_decode_tps_per_user": 0.05}]}


def sudo_inventory(path: Path, host: SandboxHost, state, with_password: bool) -> Path:
    password = f", _sudo_password=os.environ[{PASSWORD_ENV!r}]" if with_password else ""
    path.write_text(
        "import os\n\nfrom rigforge.inventory import rig_host\n\n"
        f"rigs = [rig_host({host.name!r}, profile='sandbox', ssh_hostname='127.0.0.1', ssh_port={host.port},\n"
        f"                 ssh_user={USER!r}, ssh_key={str(state.key_path)!r},\n"
        f"                 ssh_known_hosts_file={str(state.known_hosts_path)!r}, _sudo=True{password},\n"
        f"                 profile_overrides={{'bench': {BENCH!r}, 'model': {hub_model()!r}}})]\n"
    )
    return path


@pytest.fixture(scope="module")
def sudo_rig(sandbox, tmp_path_factory: pytest.TempPathFactory):
    # The stand-in Hub in the host serves the real Gemma model from here.
    model = ensure_gemma(REPO_ROOT / ".sandbox" / "models")
    host = sandbox.fresh_host("sudo")
    state = sandbox.state
    add_sudo_user(host, Path(f"{state.key_path}.pub").read_text())
    canary = hf_canary()
    serve_hub_in_host(host, model, canary.value)
    inventory = sudo_inventory(tmp_path_factory.mktemp("sudo") / "inventory.py", host, state, with_password=False)
    return host, inventory, deploy_with_canaries(host, inventory, [canary])


def test_full_deploy_as_sudoer_then_zero_changes(sudo_rig) -> None:
    host, inventory, run = sudo_rig
    assert run.result.returncode == 0, run.redact(run.result.stderr[-6000:])
    owners = exec_in(host, "stat -c '%U:%G %a %n' /etc/rigforge/profile.json /etc/rigforge/secrets 2>&1; "
                           f"stat -c '%U %a' {UPLOAD_STAGING_DIR}; ls -A {UPLOAD_STAGING_DIR}").stdout.split("\n")
    assert owners[0] == "root:root 644 /etc/rigforge/profile.json", owners
    # Uploads pass through the login user's private staging folder and leave nothing there.
    assert owners[2] == f"{USER} 700" and owners[3] == "", owners
    assert_no_changes(inventory, "deploys/full.py", env=canary_env(run.canaries))


def test_canary_token_only_in_its_file_as_sudoer(sudo_rig) -> None:
    run = sudo_rig[2]
    assert_canaries_only_in_their_files(run)
    assert run.host["staging"] == [], f"the staging folder kept {run.host['staging']}"


def test_verify_suite_as_sudoer(sudo_rig, tmp_path: Path, sandbox) -> None:
    host = sudo_rig[0]
    config = (Path(sandbox.state_dir) / "ssh_config").read_text().replace("User root", f"User {USER}")
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(config)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--hosts=paramiko://{host.name}",
         f"--ssh-config={ssh_config}", "--sudo", "tests/verify"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout


def test_sudo_password_the_pyinfra_way(sudo_rig, sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = sudo_rig[0]
    state = sandbox.state
    add_sudo_user(host, Path(f"{state.key_path}.pub").read_text(), password=PASSWORD)
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    inventory = sudo_inventory(tmp_path / "inventory.py", host, state, with_password=True)
    # Every fact of the plan is read through sudo with the password; the converged host shows zero changes.
    planned = assert_no_changes(inventory, "deploys/full.py")
    assert PASSWORD not in planned.stdout + planned.stderr, "the sudo password reached pyinfra's output"
    # A real change through sudo with the password: the host layer writes the removed record again (an upload
    # into root's /etc/rigforge), without a prompt.
    exec_in(host, "rm /etc/rigforge/profile.json")
    applied = run_pyinfra(inventory, "deploys/host.py", check=False, timeout=600)
    assert applied.returncode == 0, applied.stderr[-4000:]
    assert PASSWORD not in applied.stdout + applied.stderr
    assert exec_in(host, "stat -c '%U %a' /etc/rigforge/profile.json").stdout.strip() == "root 644"
    denied = exec_in(host, ["su", "-", USER, "-c", "sudo -n true"])
    assert denied.returncode != 0, "sudo did not ask for a password: the password case proves nothing"
