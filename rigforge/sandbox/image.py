"""Base image of the sandbox hosts (real Debian 12 systemd hosts in containers).

The e2e tests deploy onto containers that boot real systemd as PID 1 and are reached over SSH on
127.0.0.1. No image registry is reachable from the CI machine, so the base image is made here from
Debian's own packages with debootstrap and ``docker import``. The image tag carries a short hash of
the recipe (suite, packages, files, post-steps, import settings): change the recipe and a new image
is built; keep it and the existing image is reused.

Example::

    from rigforge.sandbox.docker import ensure_docker
    from rigforge.sandbox.image import build_image

    ensure_docker()
    tag = build_image()  # "rigforge-sandbox:bookworm-1a2b3c4d5e6f"
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from rigforge.sandbox.docker import SandboxError, apt_install, docker, file_lock

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
IMAGE_REPO = "rigforge-sandbox"

# What a minimal real Debian 12 server install has, so that roles meet the tools they meet on a rig:
# init and remote access (systemd, systemd-sysv, dbus, openssh-server, sudo), pyinfra's needs (python3),
# inspection tools roles and facts call (iproute2, kmod, pciutils, procps, udev), repository keys and
# downloads (ca-certificates, gnupg, curl), and the boot tools whose logic the boot role drives
# (grub2-common gives update-grub, initramfs-tools gives update-initramfs).
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

# Gives every host its own SSH host keys at first boot: the image ships none, or every container
# would share one key and strict host-key checking would prove nothing.
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

# Stand-in, sandbox only: the container's root is an overlay file system on no block device, which
# the real grub-probe cannot map, so update-grub would stop there. The real grub-probe answers
# first; only when it fails does this answer as one GPT disk with an ext4 root.
_GRUB_PROBE_STANDIN = """#!/bin/sh
# rigforge sandbox stand-in for grub-probe (the real one is grub-probe.distrib).
/usr/sbin/grub-probe.distrib "$@" 2>/dev/null && exit 0
target=device
for arg in "$@"; do case "$arg" in --target=*) target="${arg#--target=}" ;; esac; done
case "$target" in
  device) echo /dev/sda1 ;;
  disk) echo /dev/sda ;;
  fs) echo ext2 ;;
  fs_uuid) echo 2f6c8f1e-5b8a-4a57-9d8e-000000000001 ;;
  drive) echo '(hd0,gpt1)' ;;
  partmap) echo gpt ;;
  compatibility_hint) echo hd0,gpt1 ;;
esac
"""

# Files written into the root file system before the post-steps: path -> (mode, text).
IMAGE_FILES: dict[str, tuple[int, str]] = {
    "/etc/systemd/system/rigforge-ssh-hostkeys.service": (0o644, _HOSTKEYS_UNIT),
    "/usr/local/lib/rigforge-sandbox/grub-probe": (0o755, _GRUB_PROBE_STANDIN),
    # Stand-in kernel file, sandbox only (the container runs on the machine's kernel): an empty file
    # under an obviously fake version, so grub-mkconfig writes a menu entry carrying the kernel
    # command line that the boot role sets, as it would on a rig.
    "/boot/vmlinuz-0.0.0-rigforge-sandbox": (0o644, ""),
}

# Shell steps run in the chroot after debootstrap and IMAGE_FILES.
POST_STEPS: tuple[str, ...] = (
    "systemctl enable ssh.service rigforge-ssh-hostkeys.service",
    "rm -f /etc/ssh/ssh_host_*",
    # Empty machine-id: systemd makes a fresh one per container at boot.
    ": > /etc/machine-id",
    "rm -f /var/lib/dbus/machine-id",
    # A real install has /etc/default/grub and /boot/grub (from grub-pc, a boot loader not installed here).
    "test -e /etc/default/grub || cp /usr/share/grub/default/grub /etc/default/grub",
    "install -d /boot/grub",
    "dpkg-divert --local --rename --add /usr/sbin/grub-probe",
    "install -m 0755 /usr/local/lib/rigforge-sandbox/grub-probe /usr/sbin/grub-probe",
    # No unit is masked: the ones that cannot work in a container skip themselves by their own
    # conditions (udev: ConditionPathIsReadWrite=/sys; gettys: no /dev/tty0 or /dev/console), and
    # `systemctl is-system-running` answers "running" without masks (checked on this image).
    "install -d -m 0700 /root/.ssh",
    "apt-get clean",
    "rm -rf /var/lib/apt/lists/*",
)

# Image settings given to `docker import`: systemd is the command and knows it runs in a container.
IMPORT_CHANGES: tuple[str, ...] = ("ENV container=docker", 'CMD ["/lib/systemd/systemd"]')


def recipe_hash(suite: str = SUITE, packages: tuple[str, ...] = PACKAGES,
                post_steps: tuple[str, ...] = POST_STEPS,
                files: dict[str, tuple[int, str]] | None = None,
                import_changes: tuple[str, ...] = IMPORT_CHANGES) -> str:
    """Return a 12-hex-digit hash of the image recipe (same recipe, same hash)."""
    recipe = {"suite": suite, "packages": sorted(packages), "post_steps": list(post_steps),
              "files": IMAGE_FILES if files is None else files, "import_changes": list(import_changes)}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def image_tag(suite: str = SUITE) -> str:
    """Return the tag of the base image for the current recipe."""
    return f"{IMAGE_REPO}:{suite}-{recipe_hash(suite)}"


def image_exists(tag: str) -> bool:
    """Return True when the local Docker engine has an image with this tag."""
    return docker("image", "inspect", tag, check=False).returncode == 0


def _run_step(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()[-3000:]
        raise SandboxError(f"{what} failed ({proc.returncode}):\n{output}")


def _write_image_files(rootfs: Path) -> None:
    for path, (mode, text) in IMAGE_FILES.items():
        target = rootfs / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(mode)


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
        apt_install(["debootstrap"])
    started = time.monotonic()
    rootfs = Path(tempfile.mkdtemp(prefix="rigforge-rootfs-", dir=workdir))
    try:
        print(f"sandbox: debootstrap {suite} ({len(PACKAGES)} packages) into {rootfs}; about 1-3 minutes",
              flush=True)
        _run_step(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", suite,
                   str(rootfs), MIRROR], "debootstrap")
        print(f"sandbox: debootstrap done after {time.monotonic() - started:.0f}s; running post-steps",
              flush=True)
        _write_image_files(rootfs)
        for step in POST_STEPS:
            _run_step(["chroot", str(rootfs), "/bin/sh", "-ec", step], f"post-step {step!r}")
        print(f"sandbox: importing {tag}", flush=True)
        _import_rootfs(rootfs, tag)
    finally:
        _remove_rootfs(rootfs)
    print(f"sandbox: built image {tag} in {time.monotonic() - started:.0f}s", flush=True)
