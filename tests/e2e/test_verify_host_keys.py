"""The verify suite trusts a rig's host key as the deploys do, on a real sandbox host
(rigforge/connection/verify_trust.py).

Real here: a Debian 12 host with systemd and OpenSSH whose host keys are made anew (``ssh-keygen -A``, sshd
restarted: what a reinstalled rig, or another machine answering at its address, shows), known_hosts files
that still list the old key or none, and the verify suite run as a user runs it (``pytest
--hosts=paramiko://NAME --ssh-config=FILE tests/verify``). No deploy: nothing may run on the host anyway.

1. the key changed: the suite stops with the deploys' REFUSED line for that host, exits non-zero, and the
   host's sshd logged no login during the run;
2. the host is not in known_hosts: the deploys' unknown-key line, the same way;
3. the key added as the line says (``ssh-keygen -R``, ``ssh-keyscan``): the suite logs in and runs its tests.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rigforge.connection.first_contact import changed_key_line, fetch_server_key, unknown_key_line
from rigforge.sandbox import SandboxHost, exec_in
from tests.e2e.conftest import Sandbox
from tests.e2e.pyinfra_run import REPO_ROOT


def verify(host: SandboxHost, ssh_config: Path) -> subprocess.CompletedProcess[str]:
    """Run the verify suite against ``host`` as a user would, with ``ssh_config``."""
    return subprocess.run([sys.executable, "-m", "pytest", f"--hosts=paramiko://{host.name}",
                           f"--ssh-config={ssh_config}", "tests/verify", "-q", "-p", "no:cacheprovider"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)


def journal_cursor(host: SandboxHost) -> str:
    """Where sshd's journal ends now: a time would also catch the fixture's own login a second before."""
    shown = exec_in(host, "journalctl -u ssh.service -n 0 --show-cursor --no-pager").stdout
    return shown.strip().splitlines()[-1].removeprefix("-- cursor: ")


def logins_since(host: SandboxHost, cursor: str) -> list[str]:
    journal = exec_in(host, f"journalctl -u ssh.service --after-cursor='{cursor}' --no-pager -o cat").stdout
    return [line for line in journal.splitlines() if line.startswith("Accepted") or "session opened" in line]


def config_with(sandbox: Sandbox, known_hosts: Path, path: Path) -> Path:
    """The sandbox's ssh_config, with ``known_hosts`` in place of its own."""
    text = (sandbox.state_dir / "ssh_config").read_text()
    path.write_text(re.sub(r"UserKnownHostsFile \S+", f"UserKnownHostsFile {known_hosts}", text))
    return path


@pytest.fixture(scope="module")
def rekeyed(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> tuple[SandboxHost, Path]:
    """A host whose key changed after its old key was recorded; returns it and a known_hosts with the old key."""
    host = sandbox.fresh_host("verifykey")
    tmp = tmp_path_factory.mktemp("verifykey")
    old = tmp / "known_hosts"
    old.write_text(sandbox.state.known_hosts_path.read_text())
    done = exec_in(host, "rm -f /etc/ssh/ssh_host_* && ssh-keygen -A >/dev/null && systemctl restart ssh.service")
    assert done.returncode == 0, done.stderr
    return host, old


def test_a_changed_host_key_stops_the_suite_with_one_line_and_nothing_runs(
        sandbox: Sandbox, rekeyed: tuple[SandboxHost, Path], tmp_path: Path) -> None:
    host, old = rekeyed
    key = fetch_server_key("127.0.0.1", host.port, 10, [])
    started = journal_cursor(host)
    result = verify(host, config_with(sandbox, old, tmp_path / "ssh_config"))
    said = result.stderr.strip().splitlines()
    print("\n".join(said))  # with -s: the docs quote it
    assert result.returncode != 0
    assert said == [f"ERROR: [{host.name}] {changed_key_line(host.name, '127.0.0.1', host.port, str(old), key)}"]
    assert result.stdout.strip() == "", "no test may run"
    assert logins_since(host, started) == [], "the refused run logged in"


def test_an_unknown_host_key_stops_the_suite_the_same_way(
        sandbox: Sandbox, rekeyed: tuple[SandboxHost, Path], tmp_path: Path) -> None:
    host, _ = rekeyed
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    key = fetch_server_key("127.0.0.1", host.port, 10, [])
    started = journal_cursor(host)
    result = verify(host, config_with(sandbox, empty, tmp_path / "ssh_config"))
    assert result.returncode != 0
    line = unknown_key_line(host.name, "127.0.0.1", host.port, str(empty), key)
    assert result.stderr.strip().splitlines() == [f"ERROR: [{host.name}] {line}"]
    assert empty.read_text() == "", "an unknown host key was accepted"
    assert logins_since(host, started) == []


def test_with_the_new_key_added_as_the_line_says_the_suite_runs(
        sandbox: Sandbox, rekeyed: tuple[SandboxHost, Path], tmp_path: Path) -> None:
    host, old = rekeyed
    fixed = tmp_path / "known_hosts"
    fixed.write_text(old.read_text())
    subprocess.run(["ssh-keygen", "-f", str(fixed), "-R", f"[127.0.0.1]:{host.port}"], check=True,
                   capture_output=True)
    keys = subprocess.run(["ssh-keyscan", "-p", str(host.port), "127.0.0.1"], check=True, capture_output=True,
                          text=True).stdout
    fixed.write_text(fixed.read_text() + keys)
    started = journal_cursor(host)
    result = verify(host, config_with(sandbox, fixed, tmp_path / "ssh_config"))
    # Past the check the suite logs in and runs: this host was never provisioned, so its tests fail saying so.
    assert "REFUSED" not in result.stderr + result.stdout and "host key" not in result.stderr
    never = "/etc/rigforge/profile.json is missing: this host was never provisioned"
    assert never in result.stdout, result.stdout[-3000:]
    assert logins_since(host, started), "the suite never logged in"
