"""apt busy and dpkg unfinished on a real sandbox host: the host layer (``deploys/host.py``, whose first
operation installs the base packages) against a lock another process holds, and over a package dpkg left
unpacked.

Real here: the Debian 12 systemd host, apt 2.6 and dpkg 1.21 with Debian's archive, the lock taken with a
POSIX fcntl lock on /var/lib/dpkg/lock-frontend and /var/lib/dpkg/lock as unattended-upgrades takes them
(python3's ``fcntl.lockf``; ``flock`` would not stop apt), Debian's own numactl .deb left unpacked with
``dpkg --unpack``, and the pyinfra CLI without ``-v``. Nothing is a stand-in: the holder is a real process
holding the real lock, only its program is not unattended-upgrades (which would hold it for as long as
upgrades take, not for a set time).

The tests share one host and run in file order (about two minutes in all); a failed step skips the rest:

1. a wait bounded to 6 s (``apt.lock_wait_minutes: 0.1``) fails the host with one line naming the
   holder and the setting, and changes nothing (packages and /etc compared);
2. the lock held for 50 s: the run waits, says who holds it as it waits (the line is read while the
   holder still runs), and converges; a dry run then plans nothing;
3. numactl left unpacked: the run finishes it with ``dpkg --configure -a``, says so, and converges.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rigforge.facts.dpkg_state import DpkgUnfinished, parse_dpkg_state
from rigforge.operations.apt_busy import CONFIGURE_ALL
from rigforge.sandbox import SandboxHost, exec_in
from tests.e2e.conftest import Sandbox
from tests.e2e.power_cut import NOTHING_CHANGED
from tests.e2e.pyinfra_run import REPO_ROOT, assert_no_changes, parse_json_output, pyinfra_command, run_pyinfra

DEPLOY = "deploys/host.py"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
HOLDER = "/root/hold-apt-lock.py"
# Holds dpkg's two locks as unattended-upgrades does (apt_pkg takes lock-frontend, then lock), for argv[1] s.
HOLDER_SOURCE = """import fcntl, os, sys, time
locks = [open(path, "w") for path in ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock")]
for lock in locks:
    fcntl.lockf(lock, fcntl.LOCK_EX)
open("/root/hold-apt-lock.pid", "w").write(str(os.getpid()))
time.sleep(float(sys.argv[1]))
"""


@dataclass
class Busy:
    sandbox: Sandbox
    host: SandboxHost
    tmp: Path
    done: list[str] = field(default_factory=list)

    def sh(self, command: str) -> str:
        proc = exec_in(self.host, command)
        assert proc.returncode == 0, f"{command}: {proc.stderr}"
        return proc.stdout

    def inventory(self, name: str, overrides: dict | None = None) -> Path:
        return self.sandbox.write_inventory(self.tmp / f"{name}.py", [self.host], "sandbox", overrides or {})

    def require(self, step: str) -> None:
        if step not in self.done:
            pytest.skip(f"needs the earlier step {step!r}, which did not pass")

    def hold_lock(self, seconds: float) -> int:
        """Start the holder in the host (detached from this test's docker exec); return its pid."""
        self.sh(f"rm -f /root/hold-apt-lock.pid; nohup python3 {HOLDER} {seconds:g} >/dev/null 2>&1 &")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            shown = exec_in(self.host, "cat /root/hold-apt-lock.pid 2>/dev/null").stdout.strip()
            if shown:
                return int(shown)
            time.sleep(0.2)
        raise AssertionError("the lock holder did not start")


@pytest.fixture(scope="module")
def busy(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Busy:
    host = sandbox.fresh_host("aptbusy")
    rig = Busy(sandbox, host, tmp_path_factory.mktemp("aptbusy"))
    exec_in(host, f"cat > {HOLDER}", input_text=HOLDER_SOURCE)
    return rig


def clean(line: str) -> str:
    return ANSI.sub("", line).rstrip("\n")


def lines_of(text: str) -> list[str]:
    return [clean(line) for line in text.splitlines()]


def test_a_short_bound_fails_with_one_line_naming_the_holder_and_changes_nothing(busy: Busy) -> None:
    before = busy.sh(NOTHING_CHANGED)
    pid = busy.hold_lock(120)
    try:
        result = run_pyinfra(busy.inventory("short", {"apt": {"lock_wait_minutes": 0.1}}), DEPLOY, check=False)
        assert busy.sh(f"kill -0 {pid} && echo alive").strip() == "alive", "the holder must never be stopped"
    finally:
        busy.sh(f"kill {pid}")
    assert result.returncode != 0
    refusals = [line for line in lines_of(result.stderr) if "gave up after" in line]
    print("\n".join(refusals))  # with -s: the docs quote it
    assert len(refusals) == 1, result.stderr[-3000:]
    assert re.fullmatch(rf"\[{busy.host.name}\] apt is busy: pid {pid} \(python3 {HOLDER} 120\) holds "
                        r"/var/lib/dpkg/lock-frontend; gave up after [6-9] s \(apt.lock_wait_minutes: 0.1\); "
                        r"nothing was stopped: run again once it is done, or raise apt.lock_wait_minutes",
                        refusals[0]), refusals[0]
    assert busy.sh(NOTHING_CHANGED) == before, "the refused run changed the host"
    busy.done.append("short")


def test_the_run_waits_for_the_lock_saying_who_holds_it_and_converges(busy: Busy) -> None:
    busy.require("short")
    inventory = busy.inventory("wait")
    pid = busy.hold_lock(50)
    released = time.monotonic() + 50
    heard: list[tuple[float, str]] = []
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    started = time.monotonic()
    run = subprocess.Popen(pyinfra_command(inventory, DEPLOY), cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)

    def listen() -> None:
        assert run.stderr is not None
        for line in run.stderr:
            heard.append((time.monotonic(), clean(line)))

    listener = threading.Thread(target=listen)
    listener.start()
    assert run.stdout is not None
    stdout = run.stdout.read()  # not communicate(): it would read stderr too, taking lines from the listener
    run.wait(timeout=600)
    listener.join()
    output = "\n".join(line for _, line in heard)
    assert run.returncode == 0, output[-4000:]

    prefix = rf"\[{busy.host.name}\] apt is busy: pid {pid} \(python3 {HOLDER} 50\) holds /var/lib/dpkg/lock-frontend"
    waits = [(at, line) for at, line in heard if re.match(prefix, line)]
    said = "\n".join(f"{at - started:5.1f} s  {line}" for at, line in heard if "apt" in line)
    print(said)  # shown with -s: the docs quote it
    assert waits, output[-4000:]
    first_at, first = waits[0]
    assert re.fullmatch(prefix + r"; waited [0-2] s of at most 600 s \(apt.lock_wait_minutes\)", first), first
    assert first_at < released - 5, "the wait's first line came only after the holder was gone (not live)"
    # Loaded, one look at /proc/locks may take seconds: the next line comes at 30 s or a little later.
    assert any(re.search(r"; waited (3\d|4[0-5]) s of at most 600 s", line) for _, line in waits), said
    assert re.search(r"apt's lock is free after (2[5-9]|[3-5]\d) s", output), said
    assert parse_json_output(stdout) is not None
    assert busy.sh("dpkg-query -W -f='${db:Status-Status}' numactl") == "installed"
    assert_no_changes(inventory, DEPLOY)
    busy.done.append("wait")


def test_a_package_left_unpacked_is_configured_first_and_the_run_converges(busy: Busy) -> None:
    busy.require("wait")
    busy.sh("cd /root && apt-get download -q numactl >/dev/null 2>&1 && dpkg -r numactl >/dev/null "
            "&& dpkg --unpack numactl_*.deb >/dev/null")
    found = parse_dpkg_state(busy.sh(DpkgUnfinished().command()))
    assert [(package.name, package.status) for package in found.packages] == [("numactl", "unpacked")]

    inventory = busy.inventory("unpacked")
    result = run_pyinfra(inventory, DEPLOY)
    said = (f"[{busy.host.name}] dpkg: numactl (unpacked) left unfinished; finishing with {CONFIGURE_ALL} "
            "before installing")
    output = lines_of(result.stderr)
    print("\n".join(line for line in output if "dpkg" in line or "numactl" in line))  # with -s: the docs' example
    assert said in output, result.stderr[-4000:]
    assert any("Setting up numactl" in line for line in output), result.stderr[-4000:]
    assert not parse_dpkg_state(busy.sh(DpkgUnfinished().command()))
    assert busy.sh("dpkg-query -W -f='${db:Status-Status}' numactl") == "installed"
    assert_no_changes(inventory, DEPLOY)
