"""STAND-IN for NVIDIA's CUDA apt repository (sandbox tests only: NVIDIA's repository and GPUs are not
reachable here).

Builds a flat, signed apt repository laid out like
``https://developer.download.nvidia.com/compute/cuda/repos/<distro>/<arch>/`` (Packages, Release,
InRelease signed by a key made fresh per build, the key beside them) holding packages with NVIDIA's
names and real-looking versions:

- for each driver version (590.48.01 and 595.45.04 by default): ``nvidia-open`` depending on exactly
  its ``nvidia-kernel-open-dkms``, ``nvidia-driver-cuda`` and ``nvidia-persistenced``;
- ``cuda-toolkit-13-2`` 13.2.51-1 with a stand-in ``nvcc`` under /usr/local/cuda-13.2;
- kernel headers for the sandbox's kernel and a kernel "update" with its headers, and a stand-in
  ``dkms`` package (which every ``nvidia-kernel-open-dkms`` depends on) that builds a module per kernel
  (tests/standins/kernels.py).

The stand-in "kernel module" is a file in the /proc/driver/nvidia/version format; a unit of the dkms
package copies it to /run/nvidia-standin/version at boot, which is what "loading the module" means
here. /run is a fresh tmpfs at every boot, so after installing a new driver the old version stays
"loaded" until the host reboots, exactly as on a real rig. The stand-in ``nvidia-smi`` answers the
calls rigforge makes (``--version``, ``--query-gpu=driver_version``, ``-pm``, ``-pl``) from that file
the way the real one answers from the kernel module, including the "Driver/library version mismatch"
after an upgrade without reboot. Nothing else about them is real, and every file says so.

The repository is served from inside the sandbox host on 127.0.0.1 by a persistent unit (it must
survive the host's reboots), so apt, the signature check, the key download and the fingerprint check
in the driver role are all real.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
import textwrap
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path

from tests.standins.kernels import DKMS_POSTINST, DKMS_PRERM, DKMS_VERSION, dkms_deb, kernel_debs

DRIVER_VERSIONS = ("590.48.01", "595.45.04")
CUDA_PACKAGE = "cuda-toolkit-13-2"
CUDA_VERSION = "13.2.51-1"
PORT = 8737
HOST_DIR = "/srv/standin-nvidia-cuda-repo"
SERVER_UNIT = "standin-nvidia-cuda-repo.service"
KEY_NAME = "standin.pub"
LOADED_FILE = "/run/nvidia-standin/version"
#: The stand-in nvidia-smi's compute processes: a test writes real pids there (no GPU can hold memory here).
COMPUTE_APPS_FILE = "/run/nvidia-standin/compute-apps"
MODULE_FILE = "/usr/lib/nvidia-standin/module-version"
STANDIN_NOTE = "STAND-IN built by rigforge's tests (tests/standins/nvidia_cuda_repo.py); no GPU, no real driver."

NVIDIA_SMI = textwrap.dedent('''\
    #!/bin/sh
    # {note}
    # Answers the nvidia-smi calls rigforge makes from the stand-in "loaded module" file, like the real
    # tool answers from the kernel module. Two stand-in GPUs.
    SMI_VERSION={version}
    LOADED=$(sed -n 's/.*Kernel Module for [^ ]*  *\\([0-9.]*\\) .*/\\1/p' {loaded} 2>/dev/null)
    BUSES="00000000:01:00.0 00000000:02:00.0"
    if [ "$1" = "--version" ]; then
      echo "NVIDIA-SMI version  : $SMI_VERSION"
    fi
    if [ -z "$LOADED" ]; then
      echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." \\
        "Make sure that the latest NVIDIA driver is installed and running."
      exit 9
    fi
    if [ "$LOADED" != "$SMI_VERSION" ]; then
      echo "Failed to initialize NVML: Driver/library version mismatch"
      echo "NVML library version: ${{SMI_VERSION%.*}}"
      exit 18
    fi
    case "$1" in
      --version)
        echo "NVML version        : ${{SMI_VERSION%.*}}"
        echo "DRIVER version      : $LOADED"
        echo "CUDA Version        : 13.2" ;;
      --query-gpu=driver_version)
        for bus in $BUSES; do echo "$LOADED"; done ;;
      --query-compute-apps=pid,process_name,used_memory)
        # What a test says holds GPU memory, in the real CSV lines ("702, python3, 1542 MiB").
        cat {apps} 2>/dev/null; true ;;
      -pm)
        mkdir -p /run/nvidia-standin && echo "$2" > /run/nvidia-standin/persistence_mode
        for bus in $BUSES; do echo "Enabled persistence mode for GPU $bus."; done
        echo "All done." ;;
      -pl)
        mkdir -p /run/nvidia-standin && echo "$2" > /run/nvidia-standin/power_limit
        for bus in $BUSES; do echo "Power limit for GPU $bus was set to $2.00 W from 600.00 W."; done
        echo "All done." ;;
      *)
        echo "stand-in nvidia-smi: '$*' is not emulated" >&2
        exit 2 ;;
    esac
''')

MODULE_UNIT = textwrap.dedent('''\
    # {note}
    # "Loads the kernel module" at boot: publishes the installed module's version as the loaded one.
    [Unit]
    Description=Stand-in NVIDIA kernel module load (rigforge tests)
    DefaultDependencies=no
    After=local-fs.target
    Before=nvidia-persistenced.service sysinit.target

    [Service]
    Type=oneshot
    RemainAfterExit=yes
    ExecStart=/bin/sh -c 'install -d /run/nvidia-standin && cp {module} {loaded}'

    [Install]
    WantedBy=sysinit.target
''')

PERSISTENCED = textwrap.dedent('''\
    #!/bin/sh
    # {note}
    if [ ! -s {loaded} ]; then
      echo "nvidia-persistenced failed to initialize. Check syslog for more details." >&2
      exit 1
    fi
    exec sleep infinity
''')

PERSISTENCED_UNIT = textwrap.dedent('''\
    # {note}
    [Unit]
    Description=NVIDIA Persistence Daemon (stand-in)
    After=nvidia-standin-module.service

    [Service]
    ExecStart=/usr/bin/nvidia-persistenced

    [Install]
    WantedBy=multi-user.target
''')

NVCC = textwrap.dedent('''\
    #!/bin/sh
    # {note}
    echo "nvcc: NVIDIA (R) Cuda compiler driver"
    echo "Cuda compilation tools, release 13.2, V13.2.51"
''')

SERVER_UNIT_TEXT = textwrap.dedent(f'''\
    # {STANDIN_NOTE}
    [Unit]
    Description=Stand-in NVIDIA CUDA apt repository on 127.0.0.1:{PORT} (rigforge tests)
    Before=apt-daily.service

    [Service]
    ExecStart=/usr/bin/python3 -m http.server {PORT} --bind 127.0.0.1 --directory {HOST_DIR}

    [Install]
    WantedBy=multi-user.target
''')


@dataclass(frozen=True)
class StandinRepo:
    """A built stand-in repository: its directory here, the signing key's fingerprint, where it is served."""

    root: Path
    fingerprint: str
    port: int = PORT

    def profile_overrides(self, driver_version: str) -> dict:
        """``driver`` settings pointing the driver role at this repository (served in the host)."""
        base = f"http://127.0.0.1:{self.port}/{{distro}}/{{arch}}/"
        return {"driver": {"version": driver_version,
                           "repo": {"url": base, "key_url": base + KEY_NAME, "key_fingerprint": self.fingerprint}}}


def _run(cmd: list[str], **kwargs: object) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed: {proc.stderr.strip()}")
    return proc.stdout


def module_version_line(version: str, machine: str) -> str:
    """The stand-in "module" text: the layout of /proc/driver/nvidia/version of an open module (fixtures:
    tests/fixtures/gpu/*/proc-driver-nvidia-version.txt), which the stand-in nvidia-smi reads."""
    return (f"NVRM version: NVIDIA UNIX Open Kernel Module for {machine}  {version}  Release Build  "
            "(rigforge-standin@localhost)\nGCC version:  stand-in\n")


def _write(tree: Path, path: str, text: str, mode: int = 0o644) -> None:
    target = tree / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    target.chmod(mode)


def _build_deb(work: Path, out_dir: Path, name: str, version: str, arch: str, files: dict[str, tuple[str, int]],
               depends: str = "", postinst: str = "", prerm: str = "") -> Path:
    tree = work / f"{name}_{version}"
    control = (f"Package: {name}\nVersion: {version}\nArchitecture: {arch}\nMaintainer: rigforge tests "
               f"<tests@localhost>\n" + (f"Depends: {depends}\n" if depends else "")
               + f"Description: {STANDIN_NOTE}\n")
    _write(tree, "DEBIAN/control", control)
    if postinst:
        _write(tree, "DEBIAN/postinst", f"#!/bin/sh\nset -e\n{postinst}\n", 0o755)
    if prerm:
        _write(tree, "DEBIAN/prerm", f"#!/bin/sh\nset -e\n{prerm}\n", 0o755)
    for path, (text, mode) in files.items():
        _write(tree, path, text, mode)
    deb = out_dir / f"{name}_{version}_{arch}.deb"
    _run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(deb)])
    return deb


def _driver_debs(work: Path, out_dir: Path, version: str, arch: str, machine: str) -> list[Path]:
    deb_version = f"{version}-1"
    note = {"note": STANDIN_NOTE, "loaded": LOADED_FILE, "module": MODULE_FILE, "version": version,
            "apps": COMPUTE_APPS_FILE}
    enable = "systemctl enable nvidia-standin-module.service >/dev/null 2>&1 || true"
    return [
        _build_deb(work, out_dir, "nvidia-kernel-open-dkms", deb_version, arch, {
            MODULE_FILE: (module_version_line(version, machine), 0o644),
            "/lib/systemd/system/nvidia-standin-module.service": (MODULE_UNIT.format(**note), 0o644),
        }, depends=f"dkms (>= {DKMS_VERSION})", postinst=f"{enable}\n{DKMS_POSTINST}", prerm=DKMS_PRERM),
        _build_deb(work, out_dir, "nvidia-driver-cuda", deb_version, arch, {
            "/usr/bin/nvidia-smi": (NVIDIA_SMI.format(**note), 0o755),
        }),
        _build_deb(work, out_dir, "nvidia-persistenced", deb_version, arch, {
            "/usr/bin/nvidia-persistenced": (PERSISTENCED.format(**note), 0o755),
            "/lib/systemd/system/nvidia-persistenced.service": (PERSISTENCED_UNIT.format(**note), 0o644),
        }),
        _build_deb(work, out_dir, "nvidia-open", deb_version, arch, {}, depends=", ".join(
            f"{part} (= {deb_version})" for part in ("nvidia-kernel-open-dkms", "nvidia-driver-cuda",
                                                      "nvidia-persistenced"))),
    ]


def _packages_entry(deb: Path) -> str:
    fields = _run(["dpkg-deb", "--field", str(deb)]).strip()
    data = deb.read_bytes()
    return (f"{fields}\nFilename: ./{deb.name}\nSize: {len(data)}\nMD5sum: {hashlib.md5(data).hexdigest()}\n"
            f"SHA256: {hashlib.sha256(data).hexdigest()}\n\n")


def _release(repo_dir: Path, arch: str) -> str:
    lines = ["Origin: rigforge stand-in", "Label: NVIDIA CUDA stand-in", f"Architectures: {arch}",
             f"Date: {formatdate(usegmt=True)}", "SHA256:"]
    for name in ("Packages", "Packages.gz"):
        data = (repo_dir / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    return "\n".join(lines) + "\n"


def _sign(repo_dir: Path) -> str:
    """Make a fresh ed25519 key, export it beside the repository, clear-sign Release; return its fingerprint."""
    # A short temporary path: gpg-agent's socket must fit in a Unix socket name.
    gpg_home = Path(tempfile.mkdtemp(prefix="rf-gpg-"))
    try:
        gpg = ["gpg", "--batch", "--homedir", str(gpg_home), "--pinentry-mode", "loopback", "--passphrase", ""]
        _run([*gpg, "--quick-gen-key", "rigforge stand-in NVIDIA repository <standin@localhost>", "ed25519",
              "sign", "never"])
        _run([*gpg, "--armor", "--output", str(repo_dir / KEY_NAME), "--export"])
        _run([*gpg, "--clearsign", "--output", str(repo_dir / "InRelease"), str(repo_dir / "Release")])
        colons = _run([*gpg, "--with-colons", "--list-keys"])
        return next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
    finally:
        subprocess.run(["gpgconf", "--homedir", str(gpg_home), "--kill", "gpg-agent"], check=False,
                       capture_output=True)
        shutil.rmtree(gpg_home, ignore_errors=True)


def repo_paths(machine: str) -> tuple[str, str]:
    """(Debian architecture, NVIDIA repository arch directory) for ``uname -m``."""
    return {"x86_64": ("amd64", "x86_64"), "aarch64": ("arm64", "sbsa")}[machine]


def build_repo(dest: Path, distro: str = "debian12", machine: str | None = None,
               driver_versions: tuple[str, ...] = DRIVER_VERSIONS) -> StandinRepo:
    """Build the stand-in repository under ``dest`` (emptied first) for ``distro`` and return it."""
    machine = machine or os.uname().machine
    arch, arch_dir = repo_paths(machine)
    shutil.rmtree(dest, ignore_errors=True)
    repo_dir = dest / distro / arch_dir
    repo_dir.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        debs = [deb for version in driver_versions for deb in _driver_debs(work, repo_dir, version, arch, machine)]
        debs.append(dkms_deb(_build_deb, work, repo_dir, arch, STANDIN_NOTE, MODULE_FILE))
        debs += kernel_debs(_build_deb, work, repo_dir, arch, STANDIN_NOTE)
        debs.append(_build_deb(work, repo_dir, CUDA_PACKAGE, CUDA_VERSION, arch, {
            "/usr/local/cuda-13.2/bin/nvcc": (NVCC.format(note=STANDIN_NOTE), 0o755),
            "/usr/local/cuda-13.2/lib64/STANDIN": (f"{STANDIN_NOTE}\n", 0o644),
        }))
    packages = "".join(_packages_entry(deb) for deb in debs)
    (repo_dir / "Packages").write_text(packages)
    (repo_dir / "Packages.gz").write_bytes(gzip.compress(packages.encode(), mtime=0))
    (repo_dir / "Release").write_text(_release(repo_dir, arch))
    fingerprint = _sign(repo_dir)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return StandinRepo(dest, fingerprint)


def serve_in_host(repo: StandinRepo, container: str) -> None:
    """Copy the repository into the sandbox host and serve it there on 127.0.0.1, across reboots."""
    from rigforge.sandbox.docker import docker

    docker("exec", container, "rm", "-rf", HOST_DIR)
    docker("cp", str(repo.root), f"{container}:{HOST_DIR}")
    docker("exec", "-i", container, "sh", "-c", f"cat > /etc/systemd/system/{SERVER_UNIT}",
           input_text=SERVER_UNIT_TEXT)
    docker("exec", container, "systemctl", "enable", "--now", SERVER_UNIT)
    docker("exec", container, "sh", "-c",
           f"for i in $(seq 100); do curl -sf http://127.0.0.1:{repo.port}/ >/dev/null && exit 0; sleep 0.1; done; "
           "exit 1")
