"""Docker engine and base image for the sandbox hosts (real Debian 12 systemd hosts in containers).

The e2e tests deploy onto containers that boot real systemd as PID 1 and are reached over SSH on
127.0.0.1. No image registry is reachable from the CI machine, so the base image is made here from
Debian's own packages with debootstrap and ``docker import``. The image tag carries a short hash of
the recipe (suite, packages, post-steps): change the recipe and a new image is built; keep it and the
existing image is reused.

Example::

    from rigforge.sandbox_image import build_image, ensure_docker

    ensure_docker()
    tag = build_image()  # "rigforge-sandbox:bookworm-1a2b3c4d5e6f"
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
IMAGE_REPO = "rigforge-sandbox"
DOCKERD_LOG = Path("/var/log/rigforge-dockerd.log")

# What a minimal real Debian 12 server install has, so that roles meet the tools they meet on a rig:
# init and remote access (systemd, systemd-sysv, dbus, openssh-server, sudo), pyinfra's needs (python3),
# inspection tools roles and facts call (iproute2, kmod, pciutils, procps, udev), repository keys and
# downloads (ca-certificates, gnupg, curl), and the boot tools whose logic the boot role drives
# (grub2-common gives update-grub, initramfs-tools gives update-initramfs; there is no kernel image,
# as the container runs on the machine's kernel).
PACKAGES: tuple[str, ...] = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "sudo",
    "python3",
    "iproute2",
    "kmod",
    "pciutils",
    "procps",
    "udev",
    "ca-certificates",
    "gnupg",
    "curl",
    "grub2-common",
    "initramfs-tools",
)

# Unit that gives every host its own SSH host keys on first boot (the image ships none, or every
# container would share one key and strict host-key checking would prove nothing).
_HOSTKEYS_UNIT = """[Unit]
Description=Generate SSH host keys on first boot
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key
Before=ssh.service

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
"""

# Shell steps run in the chroot after debootstrap; they are part of the recipe hash.
POST_STEPS: tuple[str, ...] = (
    "systemctl enable ssh.service",
    # Per-host SSH host keys, made at first boot (see _HOSTKEYS_UNIT).
    "rm -f /etc/ssh/ssh_host_*",
    f"printf '%s' '{_HOSTKEYS_UNIT}' > /etc/systemd/system/rigforge-ssh-hostkeys.service",
    "systemctl enable rigforge-ssh-hostkeys.service",
    # Empty machine-id: systemd makes a fresh one per container at boot.
    ": > /etc/machine-id",
    "rm -f /var/lib/dbus/machine-id",
    # A real install has /etc/default/grub (written by grub-pc's postinst, which is not installed here).
    "test -e /etc/default/grub || cp /usr/share/grub/default/grub /etc/default/grub",
    # No unit is masked: the ones that cannot work in a container skip themselves by their own
    # conditions (udev: ConditionPathIsReadWrite=/sys; gettys: no /dev/tty0 or /dev/console), and
    # `systemctl is-system-running` answers "running" without masks (checked on this image).
    "install -d -m 0700 /root/.ssh",
    "apt-get clean",
    "rm -rf /var/lib/apt/lists/*",
)


class SandboxError(RuntimeError):
    """The sandbox cannot be set up; the message says what failed and what to look at."""


# Image settings given to `docker import`: systemd is the command and knows it runs in a container.
IMPORT_CHANGES: tuple[str, ...] = ("ENV container=docker", 'CMD ["/lib/systemd/systemd"]')


def recipe_hash(suite: str = SUITE, packages: tuple[str, ...] = PACKAGES,
                post_steps: tuple[str, ...] = POST_STEPS,
                import_changes: tuple[str, ...] = IMPORT_CHANGES) -> str:
    """Return a 12-hex-digit hash of the image recipe (same recipe, same hash)."""
    recipe = {"suite": suite, "packages": sorted(packages), "post_steps": list(post_steps),
              "import_changes": list(import_changes)}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def image_tag(suite: str = SUITE) -> str:
    """Return the tag of the base image for the current recipe."""
    return f"{IMAGE_REPO}:{suite}-{recipe_hash(suite)}"


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


def _apt_install(packages: list[str]) -> None:
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
    with file_lock(Path("/var/tmp/rigforge-docker.lock")):
        if not docker_answers():
            _install_and_start_docker(timeout)


def _install_and_start_docker(timeout: float) -> None:
    missing = [pkg for pkg, binary in (("docker.io", "dockerd"), ("debootstrap", "debootstrap"))
               if shutil.which(binary) is None]
    if missing:
        _apt_install(missing)
    _start_dockerd()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if docker_answers():
            print("sandbox: docker daemon answers", flush=True)
            return
        time.sleep(1)
    raise SandboxError(f"docker daemon did not answer within {timeout:.0f}s; "
                       f"last lines of {DOCKERD_LOG}:\n{_log_tail(DOCKERD_LOG)}")


def image_exists(tag: str) -> bool:
    """Return True when the local Docker engine has an image with this tag."""
    return docker("image", "inspect", tag, check=False).returncode == 0


def _run_step(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()[-3000:]
        raise SandboxError(f"{what} failed ({proc.returncode}):\n{output}")


def _import_rootfs(rootfs: Path, tag: str) -> None:
    changes = [*IMPORT_CHANGES, f"LABEL rigforge.sandbox.recipe={recipe_hash()}"]
    change_args = [arg for change in changes for arg in ("--change", change)]
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
    proc = subprocess.run(["docker", "import", *change_args, "-", tag], stdin=tar.stdout,
                          capture_output=True, text=True, check=False)
    assert tar.stdout is not None
    tar.stdout.close()
    if tar.wait() != 0 or proc.returncode != 0:
        raise SandboxError(f"docker import of {rootfs} failed: {proc.stderr.strip()}")


def _remove_rootfs(rootfs: Path) -> None:
    # A failed debootstrap can leave proc/sys mounted inside; unmount them before deleting the tree.
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mountpoint in sorted((m for m in mounts if m.startswith(f"{rootfs}/")), reverse=True):
        subprocess.run(["umount", "-l", mountpoint], check=False)
    shutil.rmtree(rootfs, ignore_errors=True)


def build_image(suite: str = SUITE, workdir: Path = Path("/var/tmp")) -> str:
    """Build the sandbox base image unless it exists; return its tag.

    + suite: Debian suite to debootstrap (the recipe's packages and post-steps apply)
    + workdir: where the temporary root file system is made (needs about 400 MB)
    """
    tag = image_tag(suite)
    if image_exists(tag):
        return tag
    # Test sessions and developers may start at once: one builds, the others wait and reuse.
    with file_lock(workdir / "rigforge-sandbox-image.lock"):
        if not image_exists(tag):
            _build(suite, tag, workdir)
    return tag


def _build(suite: str, tag: str, workdir: Path) -> None:
    if shutil.which("debootstrap") is None:
        _apt_install(["debootstrap"])
    started = time.monotonic()
    rootfs = Path(tempfile.mkdtemp(prefix="rigforge-rootfs-", dir=workdir))
    try:
        print(f"sandbox: debootstrap {suite} ({len(PACKAGES)} packages) into {rootfs}; takes 2-4 minutes",
              flush=True)
        _run_step(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", suite,
                   str(rootfs), MIRROR], "debootstrap")
        print(f"sandbox: debootstrap done after {time.monotonic() - started:.0f}s; running post-steps",
              flush=True)
        for step in POST_STEPS:
            _run_step(["chroot", str(rootfs), "/bin/sh", "-ec", step], f"post-step {step!r}")
        print(f"sandbox: importing {tag}", flush=True)
        _import_rootfs(rootfs, tag)
    finally:
        _remove_rootfs(rootfs)
    print(f"sandbox: built image {tag} in {time.monotonic() - started:.0f}s", flush=True)
