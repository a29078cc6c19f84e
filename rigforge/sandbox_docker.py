"""The Docker engine under the sandbox hosts: make it answer, and run its CLI.

On a fresh CI machine nothing is installed and PID 1 is not systemd, so ``ensure_docker`` installs
Debian's ``docker.io`` (and ``debootstrap`` for the base image), starts ``dockerd`` in the
background with its log in /var/log, and waits for ``docker info``. Where a daemon answers already,
it does nothing.

Example::

    from rigforge.sandbox_docker import docker, ensure_docker

    ensure_docker()
    print(docker("ps", "--format", "{{.Names}}").stdout)
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DOCKERD_LOG = Path("/var/log/rigforge-dockerd.log")
DOCKER_LOCK = Path("/var/tmp/rigforge-docker.lock")


class SandboxError(RuntimeError):
    """The sandbox cannot be set up; the message says what failed and what to look at."""


@contextmanager
def file_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (made if missing) for the ``with`` block."""
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def docker(*args: str, check: bool = True, input_text: str | None = None,
           timeout: float | None = 300) -> subprocess.CompletedProcess[str]:
    """Run the docker CLI and return its result; raise SandboxError with stderr when ``check`` fails."""
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, input=input_text,
                          timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise SandboxError(f"docker {' '.join(args[:3])} ... failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def docker_answers() -> bool:
    """Return True when a Docker daemon answers ``docker info``."""
    if shutil.which("docker") is None:
        return False
    try:
        return docker("info", check=False, timeout=30).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def apt_install(packages: list[str]) -> None:
    """Install Debian packages with apt-get (as root), raising SandboxError with the tail of its output."""
    print(f"sandbox: apt-get install {' '.join(packages)}", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SandboxError(f"{' '.join(cmd[:2])} failed: {proc.stderr.strip()[-2000:]}")


def _pid1_is_systemd() -> bool:
    return Path("/proc/1/comm").read_text().strip() == "systemd"


def _dockerd_running() -> bool:
    # dockerd writes its pid here; a live pid means one is starting already (e.g. by the package's init script).
    pidfile = Path("/var/run/docker.pid")
    try:
        os.kill(int(pidfile.read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


def _start_dockerd() -> None:
    if _pid1_is_systemd():
        subprocess.run(["systemctl", "start", "docker"], check=False)
        return
    if _dockerd_running():
        return
    print(f"sandbox: starting dockerd in the background (log: {DOCKERD_LOG})", flush=True)
    log = DOCKERD_LOG.open("ab")
    # A new session keeps the daemon alive when the caller's terminal or test run ends.
    subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                     start_new_session=True)
    log.close()


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def ensure_docker(timeout: float = 90) -> None:
    """Make sure a Docker daemon answers: install docker.io/debootstrap if missing, start it, wait.

    Idempotent: returns at once when ``docker info`` already answers.
    """
    if docker_answers():
        return
    # Parallel callers (test workers, developers) must not install or start two daemons.
    with file_lock(DOCKER_LOCK):
        if not docker_answers():
            _install_and_start_docker(timeout)


def _install_and_start_docker(timeout: float) -> None:
    missing = [pkg for pkg, binary in (("docker.io", "dockerd"), ("debootstrap", "debootstrap"))
               if shutil.which(binary) is None]
    if missing:
        apt_install(missing)
    _start_dockerd()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if docker_answers():
            print("sandbox: docker daemon answers", flush=True)
            return
        time.sleep(1)
    raise SandboxError(f"docker daemon did not answer within {timeout:.0f}s; "
                       f"last lines of {DOCKERD_LOG}:\n{_log_tail(DOCKERD_LOG)}")

