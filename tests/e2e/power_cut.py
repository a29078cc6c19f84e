"""Power cuts on sandbox hosts: the whole host SIGKILLed (``docker kill``: every process dies at once, no
shutdown, no unit stops, nothing flushed by a service), then started again, as a rig whose circuit tripped.

TEST MACHINERY, labelled as such: to cut the power at a known point of a step that lasts milliseconds (one
package's unpack, the DKMS build in a postinst), ``arm_hold`` puts a wrapper of one program first on dpkg's
path (``/usr/local/sbin``, and apt's ``DPkg::Path`` in ``/etc/apt/apt.conf.d/00rigforge-test-hold``: apt
runs dpkg with a path of its own). While armed (a pattern in ``/run/rigforge-hold/PROGRAM``) the wrapper
stops where a call of PROGRAM matches the pattern: it says so in ``PROGRAM.held`` and sleeps, holding the
step mid-way; the test then cuts the power there. ``dpkg-deb --fsys-tarfile X.deb`` is what dpkg runs to
read a package's files, after it has marked the package half-installed: held there, the cut lands inside
that unpack. /run is a fresh tmpfs at every boot, so after the cut the wrapper passes every call through to
the real program; ``remove_holds`` takes the wrappers away. Nothing else about the host is touched.

Example::

    arm_hold(host, "dpkg-deb", unpack_of("python3-distutils"))
    ... start the deploy ...
    wait_held(host, "dpkg-deb")
    power_cut(host)
    power_on(host, sandbox.state)
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from rigforge.sandbox import SandboxHost, SandboxState, exec_in
from rigforge.sandbox.docker import docker
from rigforge.sandbox.hosts import wait_ready
from tests.e2e.pyinfra_run import REPO_ROOT, PyinfraResult, parse_json_output, pyinfra_command

HOLD_DIR = "/run/rigforge-hold"
APT_PATH_CONF = "/etc/apt/apt.conf.d/00rigforge-test-hold"
#: apt's default DPkg::Path, with /usr/local/sbin first.
DPKG_PATH = "/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"
#: What a run that refuses must leave as it was: the package states and every file of /etc.
NOTHING_CHANGED = "dpkg -l | sha256sum; find /etc -xdev -printf '%p %m %s %T@\\n' | sort | sha256sum"

WRAPPER = """#!/bin/sh
# rigforge TEST MACHINERY (tests/e2e/power_cut.py): while {hold_dir}/{program} holds a pattern that this
# call's arguments match, stop here (so a test can cut the power at this point); else run the real {program}.
if [ -s {hold_dir}/{program} ] && printf '%s\\n' "$*" | grep -Eq -f {hold_dir}/{program}; then
    printf '%s\\n' "$*" > {hold_dir}/{program}.held
    exec sleep infinity
fi
exec {real} "$@"
"""


def unpack_of(package: str) -> str:
    """The pattern of dpkg's ``dpkg-deb --fsys-tarfile`` call for ``package``'s .deb (apt names its links
    ``N-NAME_VERSION_ARCH.deb`` in a temporary folder; a single package is read from the archive cache)."""
    return rf"^--fsys-tarfile .*/([0-9]+-)?{re.escape(package)}_[^/]*\.deb$"


def arm_hold(host: SandboxHost, program: str, pattern: str) -> None:
    """Hold ``program`` at its first call matching ``pattern`` (an ``grep -E`` regex of its arguments)."""
    real = exec_in(host, f"PATH=/usr/sbin:/usr/bin:/sbin:/bin command -v {shlex.quote(program)}").stdout.strip()
    assert real, f"{program} is not on the host"
    wrapper = WRAPPER.format(hold_dir=HOLD_DIR, program=program, real=real)
    script = (f"install -m 755 /dev/stdin /usr/local/sbin/{program} && "
              f"echo 'DPkg::Path \"{DPKG_PATH}\";' > {APT_PATH_CONF} && install -d {HOLD_DIR} && "
              f"rm -f {HOLD_DIR}/{program}.held && printf '%s\\n' {shlex.quote(pattern)} > {HOLD_DIR}/{program}")
    done = exec_in(host, script, input_text=wrapper)
    assert done.returncode == 0, done.stderr


def held(host: SandboxHost, program: str) -> str:
    """The arguments of the call the hold stopped (empty while none is held)."""
    return exec_in(host, f"cat {HOLD_DIR}/{program}.held 2>/dev/null || true").stdout.strip()


def remove_holds(host: SandboxHost, *programs: str) -> None:
    """Take the wrappers and apt's path setting away."""
    paths = " ".join(f"/usr/local/sbin/{program}" for program in programs)
    exec_in(host, f"rm -f {paths} {APT_PATH_CONF}; rm -rf {HOLD_DIR}")


def power_cut(host: SandboxHost) -> None:
    """SIGKILL every process of the host at once (``docker kill``), as a power cut would. A host caught
    between its own stop and Docker starting it again (a reboot) is cut as soon as it runs again."""
    deadline = time.monotonic() + 60
    while docker("kill", "--signal", "KILL", host.container, check=False).returncode != 0:
        assert time.monotonic() < deadline, f"{host.name} could not be killed"
        time.sleep(0.1)
    while docker("inspect", "-f", "{{.State.Running}}", host.container).stdout.strip() != "false":
        assert time.monotonic() < deadline, f"{host.name} still runs after docker kill"
        time.sleep(0.2)


def power_on(host: SandboxHost, state: SandboxState) -> None:
    """Start the host again and wait until systemd is up and SSH logs in with its pinned host key."""
    docker("start", host.container)
    wait_ready(host, state)


def run_and_cut(inventory: Path, deploy: str, log: Path, ready: Callable[[], bool], cut: Callable[[], None],
                timeout_s: float = 900, exit_timeout_s: float = 600) -> PyinfraResult:
    """Run ``deploy`` (``-y --json``) in the background, call ``cut`` once ``ready()`` says the step is under way
    (``power_cut``, and perhaps ``power_on`` while the run waits for the host), and return the run's result
    once it ended."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = pyinfra_command(inventory, deploy)
    out = log.with_suffix(".json")
    with log.open("w") as errors, out.open("w") as output:  # files: a full pipe would stall pyinfra
        run = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=output, stderr=errors)
    try:
        deadline = time.monotonic() + timeout_s
        while not ready():
            assert run.poll() is None, f"the deploy ended before the step under test:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"the step under test never started:\n{log.read_text()[-3000:]}"
            time.sleep(0.3)
        cut()
        returncode = run.wait(timeout=exit_timeout_s)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    stdout = out.read_text()
    data = parse_json_output(stdout)
    return PyinfraResult(command, returncode, stdout, log.read_text(), data, (data or {}).get("plan") or [])
