"""The Docker side of the sandbox hosts: make the engine answer, run its CLI, create the containers.

On a fresh CI machine nothing is installed and PID 1 is not systemd, so ``ensure_docker`` installs
Debian's ``docker.io`` (and ``debootstrap`` for the base image), starts ``dockerd`` in the
background with its log in /var/log, and waits for ``docker info``. Where a daemon answers already,
it does nothing.

Example::

    from rigforge.sandbox.docker import docker, ensure_docker

    ensure_docker()
    print(docker("ps", "--format", "{{.Names}}").stdout)
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LABEL = "rigforge.sandbox"
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


#: Every sandbox host runs systemd, which holds a few dozen inotify instances; all containers count against
#: root's one limit, and the kernel default (128) runs out at a handful of hosts ("Failed to create inotify
#: object: Too many open files", after which a host never finishes booting).
INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
MIN_INOTIFY_INSTANCES = 1024


def ensure_inotify_room() -> None:
    """Raise this machine's inotify instance limit so several systemd hosts can boot side by side."""
    try:
        current = int(INOTIFY_INSTANCES.read_text())
        if current < MIN_INOTIFY_INSTANCES:
            INOTIFY_INSTANCES.write_text(f"{MIN_INOTIFY_INSTANCES}\n")
            print(f"sandbox: fs.inotify.max_user_instances {current} -> {MIN_INOTIFY_INSTANCES}", flush=True)
    except OSError as error:
        print(f"sandbox: cannot raise fs.inotify.max_user_instances ({error}); many hosts may not boot", flush=True)


def ensure_docker(timeout: float = 90) -> None:
    """Make sure a Docker daemon answers: install docker.io/debootstrap if missing, start it, wait.

    Idempotent: returns at once when ``docker info`` already answers.
    """
    ensure_inotify_room()
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


def container_name(name: str) -> str:
    """Return the container name of the sandbox host ``name``."""
    return f"rigforge-{name}"


def run_args(name: str, port: int, image: str, mount_docker_socket: bool = False) -> list[str]:
    """Return the ``docker run`` arguments of a host (flags checked in shared/notes/test-hosts.md).

    ``--privileged`` is not used: it asks for capabilities the CI machine lacks.
    """
    args = ["run", "-d", "--name", container_name(name), "--hostname", name, "--label", f"{LABEL}=1",
            "--restart", "always",
            # systemd powers off cleanly on SIGRTMIN+3 (`docker stop`); it ignores the default SIGTERM.
            "--stop-signal", "SIGRTMIN+3", "--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN",
            "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
            "--cgroupns=host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
            "--tmpfs", "/run", "--tmpfs", "/run/lock", "-p", f"127.0.0.1:{port}:22"]
    if mount_docker_socket:
        args += ["-v", "/var/run/docker.sock:/var/run/docker.sock"]
    return [*args, image, "/lib/systemd/systemd"]


def inspect_container(container: str) -> dict | None:
    """Return ``docker inspect`` of a container, or None when there is no such container."""
    proc = docker("inspect", "--type", "container", container, check=False)
    return json.loads(proc.stdout)[0] if proc.returncode == 0 else None


def published_port(info: dict) -> int:
    """Return the loopback port a sandbox container publishes its sshd on."""
    return int(info["HostConfig"]["PortBindings"]["22/tcp"][0]["HostPort"])


def has_docker_socket(info: dict) -> bool:
    """Return True when the container has the machine's docker socket mounted."""
    return any(m.get("Destination") == "/var/run/docker.sock" for m in info.get("Mounts", []))


def free_port() -> int:
    """Return a loopback TCP port that is free now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def create_container(name: str, image: str, mount_docker_socket: bool, port: int | None = None) -> int:
    """Run a new sandbox container (on ``port`` when given and free); return its SSH port."""
    # Another process may grab a free port between the probe and docker run: retry on a new one.
    for _ in range(5):
        chosen = port or free_port()
        proc = docker(*run_args(name, chosen, image, mount_docker_socket), check=False)
        if proc.returncode == 0:
            return chosen
        if "allocated" not in proc.stderr and "in use" not in proc.stderr:
            raise SandboxError(f"docker run for {name} failed: {proc.stderr.strip()}")
        docker("rm", "-f", container_name(name), check=False)  # created, but could not bind its port
        port = None
    raise SandboxError(f"no free loopback port found for {name}")


#: Extra certificate authorities this machine trusts (e.g. an egress proxy's): a sandbox host must trust
#: them too, or it cannot reach the package registries this machine reaches.
MACHINE_CA_DIR = Path("/usr/local/share/ca-certificates")

_TRUST_SYSTEM_STORE = (
    "update-ca-certificates >/dev/null 2>&1 && "
    # pip in a venv uses its own certifi bundle; point it at the system store that now holds the extra CAs.
    "printf '[global]\\ncert = /etc/ssl/certs/ca-certificates.crt\\n' > /etc/pip.conf"
)


def trust_machine_cas(container: str) -> int:
    """Copy this machine's extra CA certificates into ``container`` and trust them; return how many."""
    certs = sorted(MACHINE_CA_DIR.glob("*.crt")) if MACHINE_CA_DIR.is_dir() else []
    if not certs:
        return 0
    for cert in certs:
        docker("cp", str(cert), f"{container}:/usr/local/share/ca-certificates/{cert.name}", timeout=30)
    docker("exec", container, "sh", "-c", _TRUST_SYSTEM_STORE, timeout=60)
    return len(certs)
