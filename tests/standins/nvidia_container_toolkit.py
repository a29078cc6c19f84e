"""STAND-IN for NVIDIA's container toolkit repository (sandbox tests only; NVIDIA's repo is unreachable here).

Builds a flat, signed apt repository laid out like https://nvidia.github.io/libnvidia-container/stable/
(``deb/<arch>/`` with Packages, Release, InRelease, and the signing key as ``gpgkey``) holding one package
named ``nvidia-container-toolkit``. Its ``nvidia-ctk`` implements only ``runtime configure
--runtime=docker`` the way the real tool does it (adds ``runtimes.nvidia`` to /etc/docker/daemon.json)
and logs every call to /var/log/nvidia-ctk-standin.log, so tests can count calls. Its
``nvidia-container-runtime`` hands everything to runc (no GPUs here). The key is made fresh per build.

The repository is served from inside the sandbox host on 127.0.0.1 (``serve_in_host``), so apt, the
signature check and the key download are all real.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "nvidia-container-toolkit"
VERSION = "1.0.0~standin-1"
PORT = 8765
HOST_DIR = "/srv/standin-nvidia-repo"

NVIDIA_CTK = textwrap.dedent('''\
    #!/usr/bin/python3
    """STAND-IN nvidia-ctk for rigforge sandbox tests: only `runtime configure --runtime=docker`."""
    import json, os, sys

    CONFIG = "/etc/docker/daemon.json"
    with open("/var/log/nvidia-ctk-standin.log", "a") as log:
        log.write(" ".join(sys.argv[1:]) + "\\n")
    if sys.argv[1:4] != ["runtime", "configure", "--runtime=docker"]:
        sys.exit("nvidia-ctk stand-in: only 'runtime configure --runtime=docker' is implemented")
    config = {}
    if os.path.exists(CONFIG) and open(CONFIG).read().strip():
        config = json.load(open(CONFIG))
    config.setdefault("runtimes", {})["nvidia"] = {"args": [], "path": "nvidia-container-runtime"}
    with open(CONFIG + ".tmp", "w") as out:
        json.dump(config, out, indent=4)
    os.replace(CONFIG + ".tmp", CONFIG)
    print("INFO[0000] Wrote updated config to " + CONFIG)
    print("INFO[0000] It is recommended that docker daemon be restarted.")
''')

RUNTIME_SHIM = "#!/bin/sh\n# STAND-IN nvidia-container-runtime for rigforge sandbox tests: runc.\nexec runc \"$@\"\n"


@dataclass(frozen=True)
class StandinRepo:
    """A built stand-in repository: its directory here and the profile settings that point at it."""

    root: Path
    port: int = PORT

    def profile_overrides(self) -> dict:
        """``container.toolkit_repo`` settings for a repository served in the host on 127.0.0.1."""
        base = f"http://127.0.0.1:{self.port}"
        return {"container": {"toolkit_repo": {"url": f"{base}/deb/{{arch}}/", "key_url": f"{base}/gpgkey"}}}


def _run(cmd: list[str], **kwargs) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed: {proc.stderr.strip()}")
    return proc.stdout


def _build_deb(work: Path, arch_dir: Path) -> Path:
    tree = work / "pkg"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "usr/bin").mkdir(parents=True)
    (tree / "DEBIAN/control").write_text(
        f"Package: {PACKAGE}\nVersion: {VERSION}\nArchitecture: all\nMaintainer: rigforge tests <tests@localhost>\n"
        "Depends: python3\nDescription: STAND-IN for NVIDIA's container toolkit (rigforge sandbox tests only)\n")
    for name, text in (("nvidia-ctk", NVIDIA_CTK), ("nvidia-container-runtime", RUNTIME_SHIM)):
        (tree / "usr/bin" / name).write_text(text)
        (tree / "usr/bin" / name).chmod(0o755)
    deb = arch_dir / f"{PACKAGE}_{VERSION.replace(':', '%3a')}_all.deb"
    _run(["dpkg-deb", "--root-owner-group", "--build", str(tree), str(deb)])
    return deb


def _packages_entry(deb: Path, arch_dir: Path) -> str:
    fields = _run(["dpkg-deb", "--field", str(deb)]).strip()
    data = deb.read_bytes()
    return (f"{fields}\nFilename: ./{deb.relative_to(arch_dir)}\nSize: {len(data)}\n"
            f"SHA256: {hashlib.sha256(data).hexdigest()}\n\n")


def _release(arch_dir: Path) -> str:
    lines = ["Origin: rigforge stand-in", "Label: nvidia-container-toolkit stand-in", "Suite: stable",
             "Date: Thu, 01 Jan 2026 00:00:00 UTC", "SHA256:"]
    for name in ("Packages", "Packages.gz"):
        data = (arch_dir / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    return "\n".join(lines) + "\n"


def build_repo(dest: Path, extra: Callable[[Path, Path], list[Path]] | None = None) -> StandinRepo:
    """Build the stand-in repository under ``dest`` (emptied first) and return it.

    + extra: builds more stand-in packages into the repository, called as ``extra(scratch, arch_dir)``
      (e.g. ``tests.standins.docker_ce.build_debs``)
    """
    shutil.rmtree(dest, ignore_errors=True)
    arch_dir = dest / "deb" / _run(["dpkg", "--print-architecture"]).strip()
    arch_dir.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        debs = [_build_deb(work, arch_dir), *(extra(work, arch_dir) if extra else [])]
        packages = "".join(_packages_entry(deb, arch_dir) for deb in debs)
        (arch_dir / "Packages").write_text(packages)
        (arch_dir / "Packages.gz").write_bytes(gzip.compress(packages.encode(), mtime=0))
        (arch_dir / "Release").write_text(_release(arch_dir))
        gpg_home = work / "gnupg"
        gpg_home.mkdir(mode=0o700)
        gpg = ["gpg", "--batch", "--homedir", str(gpg_home), "--pinentry-mode", "loopback", "--passphrase", ""]
        _run([*gpg, "--quick-gen-key", "rigforge stand-in repo <standin@localhost>", "ed25519", "sign", "never"])
        _run([*gpg, "--armor", "--output", str(dest / "gpgkey"), "--export"])
        _run([*gpg, "--clearsign", "--output", str(arch_dir / "InRelease"), str(arch_dir / "Release")])
    os.chmod(dest, 0o755)
    return StandinRepo(dest)


def serve_in_host(repo: StandinRepo, container: str) -> None:
    """Copy the repository into the sandbox host and serve it there on 127.0.0.1 (a transient unit)."""
    from rigforge.sandbox.docker import docker

    docker("exec", container, "rm", "-rf", HOST_DIR)
    docker("cp", str(repo.root), f"{container}:{HOST_DIR}")
    docker("exec", container, "systemd-run", "--unit", "standin-nvidia-repo", "--collect",
           "python3", "-m", "http.server", str(repo.port), "--bind", "127.0.0.1", "--directory", HOST_DIR)
    docker("exec", container, "sh", "-c",
           f"for i in $(seq 50); do curl -sf http://127.0.0.1:{repo.port}/gpgkey >/dev/null && exit 0; "
           "sleep 0.1; done; exit 1")
