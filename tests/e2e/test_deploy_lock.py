"""One deploy at a time per host: the deploy lock on real sandbox hosts, with the real pyinfra CLI.

Real here: Debian 12 hosts with systemd, SSH, deploys/serve.py (xllamacpp from PyPI, Gemma 3 270M uploaded
with the ``local`` source) and deploys/preflight.py. The "other controller" of the last test is a lock
record written on the host by the test, standing in for a laptop we do not have: only its JSON line is
made up, the refusal and the take-over are the code under test. The tests share one host and run in order.

1. two deploys at once against one host: the second refuses with one line naming the first (controller,
   pid, deploy, since); the first completes and the lock is gone after it;
2. a dry run neither takes nor leaves a lock, and plans no change;
3. a lock held by another controller stops that host only: the other host of the inventory goes on; then
   ``--data break_lock=true`` takes it over.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rigforge.operations.lock import LOCK_DIR, LOCK_PATH, TAKE_NAME, Holder
from rigforge.sandbox import SandboxHost, exec_in
from rigforge.sandbox.model import ensure_gemma
from tests.e2e.conftest import Sandbox
from tests.e2e.pyinfra_run import REPO_ROOT, assert_no_changes, pyinfra_command, run_pyinfra

DEPLOY = "deploys/serve.py"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
REFUSAL = re.compile(r"rigforge: (\S+) is being deployed by (\S+) \(pid (\d+), (\S+)\) since (.+?); nothing done")


@dataclass
class Locked:
    sandbox: Sandbox
    host: SandboxHost
    inventory: Path
    tmp: Path


@pytest.fixture(scope="module")
def locked(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Locked]:
    tmp = tmp_path_factory.mktemp("lock")
    model = ensure_gemma(REPO_ROOT / ".cache" / "models")
    host = sandbox.fresh_host("lock")
    inventory = sandbox.write_inventory(tmp / "inventory.py", [host], "sandbox", {"model": {"local_path": str(model)}})
    yield Locked(sandbox, host, inventory, tmp)


def lock_on(host: SandboxHost) -> str | None:
    """The lock file's text on the host, None when there is none."""
    shown = exec_in(host, f"cat {LOCK_PATH}")
    return shown.stdout if shown.returncode == 0 else None


def start_deploy(inventory: Path, log: Path, *args: str) -> subprocess.Popen:
    """Start ``pyinfra -y`` in the background, its output to ``log`` (a full pipe would stall it)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with log.open("w") as out:
        return subprocess.Popen(pyinfra_command(inventory, DEPLOY, *args), cwd=REPO_ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT)


def refusals(output: str) -> list[str]:
    return [line for line in output.splitlines() if REFUSAL.search(line)]


def test_second_deploy_refuses_while_the_first_runs(locked: Locked) -> None:
    host = locked.host
    first = start_deploy(locked.inventory, locked.tmp / "first.log")
    try:
        deadline = time.monotonic() + 300
        while (record := lock_on(host)) is None:
            assert first.poll() is None, (locked.tmp / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the first deploy never took the lock"
            time.sleep(0.3)
        holder = json.loads(record)
        assert holder["pid"] == first.pid and holder["deploy"] == DEPLOY

        second = run_pyinfra(locked.inventory, DEPLOY, check=False)
        output = second.stdout + second.stderr
        assert second.returncode != 0
        lines = refusals(output)
        assert len(lines) == 1, output[-3000:]
        name, controller, pid, deploy, since = REFUSAL.search(lines[0]).groups()  # type: ignore[union-attr]
        assert (name, controller, int(pid), deploy, since) == (
            host.name, holder["controller"], first.pid, DEPLOY, holder["since"])
        assert "Traceback" not in output
        (locked.tmp / "second.log").write_text(output)
        # pyinfra stops a failed host at the failing operation: the take was the refused run's last one.
        started = re.findall(r"^--> Starting operation: (.*)$", ANSI.sub("", output), re.M)
        assert started[-1].strip() == TAKE_NAME, started
        assert lock_on(host) == record
        assert first.wait(timeout=900) == 0, (locked.tmp / "first.log").read_text()[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert lock_on(host) is None


def test_dry_run_takes_no_lock(locked: Locked) -> None:
    assert_no_changes(locked.inventory, DEPLOY)
    assert lock_on(locked.host) is None


def test_other_controllers_lock_stops_only_that_host(locked: Locked) -> None:
    host, other = locked.host, locked.sandbox.fresh_host("lock-free")
    someone = Holder(controller="alice@laptop", machine_id="0123456789ab", pid=4242, pid_started="",
                     deploy="deploys/full.py", since="2026-11-23 03:00:00 UTC")
    exec_in(host, f"install -d {LOCK_DIR} && cat > {LOCK_PATH}", input_text=someone.record() + "\n")
    inventory = locked.sandbox.write_inventory(locked.tmp / "two.py", [host, other], "sandbox")

    refused = run_pyinfra(inventory, "deploys/preflight.py", check=False)
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0
    assert refusals(output) == [line for line in output.splitlines() if
                                f"rigforge: {host.name} is being deployed by alice@laptop (pid 4242, "
                                "deploys/full.py) since 2026-11-23 03:00:00 UTC; nothing done" in line]
    assert len(refusals(output)) == 1
    assert refused.data["results"]["failed_hosts"] == [host.name], output[-3000:]  # type: ignore[index]
    assert re.search(rf"preflight {other.name}: \d+ ok", output), output[-3000:]  # the other host went on
    assert lock_on(other) is None and lock_on(host) == someone.record() + "\n"

    broken = run_pyinfra(inventory, "deploys/preflight.py", "--data", "break_lock=true")
    assert "taking over the deploy lock held by alice@laptop since 2026-11-23 03:00:00 UTC: " \
           "--data break_lock=true" in broken.stdout + broken.stderr
    assert lock_on(host) is None and lock_on(other) is None


def test_a_file_that_is_no_lock_record_is_refused_then_broken(locked: Locked) -> None:
    host = locked.host
    exec_in(host, f"install -d {LOCK_DIR} && printf 'garbage\\n' > {LOCK_PATH}")
    refused = run_pyinfra(locked.inventory, "deploys/preflight.py", check=False)
    assert refused.returncode != 0
    assert f"rigforge: {LOCK_PATH} on {host.name} is not a lock record ('garbage'); nothing done on it." in \
        refused.stdout + refused.stderr
    run_pyinfra(locked.inventory, "deploys/preflight.py", "--data", "break_lock=true")
    assert lock_on(host) is None
