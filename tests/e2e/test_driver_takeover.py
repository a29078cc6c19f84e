"""A driver the owner installed, taken over by the host layer: Debian 12's own driver 535 on one sandbox host,
NVIDIA's .run installer on another, both running ``deploys/host.py`` of the 2x-pix profile in one fleet.

Without ``--data replace_driver=true`` each host stops before any change, naming what would be removed (apt's
own simulation of the purge) and the switch; ``skip_preflight=true`` does not get past the driver guard; a
wrong value for the switch stops the run before any operation. The dry run with the switch shows every
package apt would purge and changes nothing. With the switch: the .run's ``nvidia-uninstall --silent``, the
purge of Debian's 20 packages, the profile's driver, one reboot each; the next run plans zero changes and the
verify suite passes. Then a process of the owner's holding GPU memory stops the serving layer before any
change, and keeps running.

Real here: Debian 12's ``nvidia-driver`` 535.261.03 and ``nvidia-kernel-dkms`` with everything they pull in,
from the Debian archive's non-free and contrib components (a few hundred MB once per machine: the .debs are
kept in ``~/.cache/rigforge-tests``), real dkms 3.0.10 among them; apt's simulation and purge; the hosts'
systemd, reboots and SSH; the pyinfra CLI.

STAND-INS, because NVIDIA's repository, GPUs and a real kernel build cannot exist here: NVIDIA's repository
(tests/standins/nvidia_cuda_repo.py: its dkms stand-in upgrades Debian's dkms as a newer dkms would), and
the .run installer (tests/standins/nvidia_runfile.py: its files, log, record and an ``nvidia-uninstall`` that
removes them as the real one does).

The tests share the two hosts and run in file order; a failed step skips the rest.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyinfra_run import REPO_ROOT, PyinfraResult, assert_no_changes, run_pyinfra

from rigforge.sandbox import SandboxHost, boot_token, exec_in
from rigforge.sandbox.docker import docker
from tests.standins.nvidia_cuda_repo import COMPUTE_APPS_FILE, build_repo, serve_in_host
from tests.standins.nvidia_runfile import RUNFILE_VERSION, install_runfile

if TYPE_CHECKING:
    from conftest import Sandbox

PROFILE = "2x-pix"
DRIVER = "595.45.04"
DEBIAN_DRIVER = ("nvidia-driver", "nvidia-kernel-dkms")
DEB_CACHE = Path.home() / ".cache" / "rigforge-tests" / "debian12-nvidia-driver-debs"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Everything the host layer or a driver change would touch: files, packages, holds, units, the .run's files.
SNAPSHOT = (
    "find /etc /boot /usr/local /usr/bin /lib/modules /var/lib/apt/lists /var/lib/dkms /var/lib/nvidia -xdev "
    "-printf '%p %m %U %G %s %T@\\n' 2>/dev/null | sort | sha256sum; "
    "find /etc /boot /usr/local -xdev -type f -exec sha256sum {} + | sort | sha256sum; "
    "dpkg -l | sha256sum; apt-mark showhold; systemctl list-unit-files --no-legend | sha256sum; "
    "ls /run/rigforge 2>/dev/null; true"
)
VERIFY_MODULES = [f"tests/verify/test_{name}.py" for name in ("driver", "cuda", "modprobe")]


@dataclass
class Rigs:
    sandbox: Sandbox
    debian: SandboxHost
    runfile: SandboxHost
    inventory: Path
    done: list[str] = field(default_factory=list)

    @property
    def hosts(self) -> tuple[SandboxHost, SandboxHost]:
        return self.debian, self.runfile

    def require(self, step: str) -> None:
        if step not in self.done:
            pytest.skip(f"needs the earlier step {step!r}, which did not pass")

    def snapshots(self) -> list[str]:
        return [sh(host, SNAPSHOT) for host in self.hosts]


def sh(host: SandboxHost, command: str) -> str:
    proc = exec_in(host, command)
    assert proc.returncode == 0, f"{command}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    return proc.stdout


def install_debian_driver(host: SandboxHost) -> None:
    """What an owner does on Debian 12: add contrib and non-free, install ``nvidia-driver`` from the archive."""
    sh(host, "sed -i 's/ main$/ main contrib non-free non-free-firmware/' /etc/apt/sources.list && "
             "apt-get update -qq")
    DEB_CACHE.mkdir(parents=True, exist_ok=True)
    cached = sorted(DEB_CACHE.glob("*.deb"))
    if cached:
        docker("cp", f"{DEB_CACHE}/.", f"{host.container}:/var/cache/apt/archives/")
    sh(host, f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends {' '.join(DEBIAN_DRIVER)}")
    subprocess.run(["docker", "cp", f"{host.container}:/var/cache/apt/archives/.", str(DEB_CACHE)], check=False,
                   capture_output=True)


@pytest.fixture(scope="module")
def rigs(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Rigs:
    debian, runfile = sandbox.fresh_host("debdriver"), sandbox.fresh_host("runfile")
    repo = build_repo(tmp_path_factory.mktemp("standin-repo"))
    for host in (debian, runfile):
        serve_in_host(repo, host.container)
    install_debian_driver(debian)
    install_runfile(runfile)
    inventory = sandbox.write_inventory(tmp_path_factory.mktemp("inventory") / "inventory.py", [debian, runfile],
                                        PROFILE, repo.profile_overrides(DRIVER))
    return Rigs(sandbox, debian, runfile, inventory)


def _log(result: PyinfraResult) -> str:
    return ANSI.sub("", result.stderr + result.stdout)


def _lines(log: str, host: SandboxHost, marker: str) -> list[str]:
    return [line.split(f"[{host.name}] ", 1)[-1].strip() for line in log.splitlines()
            if f"[{host.name}]" in line and marker in line]


def test_without_the_switch_both_hosts_stop_before_any_change(rigs: Rigs) -> None:
    before = rigs.snapshots()
    result = run_pyinfra(rigs.inventory, "deploys/host.py", check=False)
    log = _log(result)
    assert result.returncode != 0 and "Traceback" not in log, log[-3000:]
    (debian,) = _lines(log, rigs.debian, "already there: nvidia-driver:")
    (runfile,) = _lines(log, rigs.runfile, "already there: nvidia-driver:")
    print(debian, runfile, sep="\n")  # the docs' real output lines
    assert "535.261.03 (proprietary) (the distribution (deb.debian.org/debian bookworm): firmware-nvidia-gsp" in debian
    assert "replace, with --data replace_driver=true" in debian
    assert "apt would purge 20 packages: nvidia-driver, nvidia-kernel-dkms, firmware-nvidia-gsp," in debian
    assert f"{RUNFILE_VERSION} (open) (NVIDIA's .run installer: nvidia-uninstall" in runfile
    assert "it would run /usr/bin/nvidia-uninstall --silent" in runfile
    assert rigs.snapshots() == before, "a refused deploy changed a host"

    # skip_preflight goes past the table, not past the driver guard.
    skipped = run_pyinfra(rigs.inventory, "deploys/host.py", "--data", "skip_preflight=true", check=False)
    log = _log(skipped)
    assert skipped.returncode != 0 and "Traceback" not in log, log[-3000:]
    for host in rigs.hosts:
        (line,) = _lines(log, host, "allow it with --data replace_driver=true; nothing was changed on this host")
        assert line.startswith("nvidia-driver: "), line
    assert rigs.snapshots() == before, "skip_preflight got past the driver guard"

    wrong = run_pyinfra(rigs.inventory, "deploys/host.py", "--data", "replace_driver=yes", check=False)
    assert wrong.returncode != 0
    errors = [line for line in _log(wrong).splitlines() if "replace_driver" in line]
    assert errors and "--data replace_driver='yes': expected true or false" in errors[0], _log(wrong)[-2000:]
    assert "Starting operation" not in _log(wrong) and "already there" not in _log(wrong)
    assert rigs.snapshots() == before
    rigs.done.append("refused")


def test_the_dry_run_with_the_switch_shows_apts_purge_and_changes_nothing(rigs: Rigs) -> None:
    rigs.require("refused")
    before = rigs.snapshots()
    result = run_pyinfra(rigs.inventory, "deploys/host.py", "--data", "replace_driver=true", dry=True)
    log = _log(result)
    (purge,) = _lines(log, rigs.debian, "driver: apt would purge 20 packages (apt-get -s): ")
    for name in ("nvidia-driver 535.261.03-1", "libnvidia-ml1 535.261.03-1", "nvidia-kernel-common 20220217+3~deb12u1"):
        assert name in purge, purge
    assert _lines(log, rigs.runfile, "driver: replacing ") == [
        f"driver: replacing {RUNFILE_VERSION} (open) from NVIDIA's .run installer: /usr/bin/nvidia-uninstall --silent"]
    assert rigs.snapshots() == before, "the dry run changed a host"
    rigs.done.append("dry")


def test_with_the_switch_both_hosts_converge_with_one_reboot(rigs: Rigs) -> None:
    rigs.require("dry")
    tokens = [boot_token(host) for host in rigs.hosts]
    result = run_pyinfra(rigs.inventory, "deploys/host.py", "--data", "replace_driver=true")
    log = _log(result)
    assert all(boot_token(host) != token for host, token in zip(rigs.hosts, tokens, strict=True))
    assert log.count("rebooted; back after") == 2
    print("\n".join(line for line in log.splitlines() if re.search(r"\] +(driver: |reboot)", line)))  # docs
    for host in rigs.hosts:
        assert f"DRIVER version      : {DRIVER}" in sh(host, "nvidia-smi --version")
        assert sh(host, "apt-mark showhold").split() == ["nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-open",
                                                         "nvidia-persistenced"]
    # Nothing built from Debian's driver source is left: no second set of libraries.
    left = sh(rigs.debian, "dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${source:Package}\\n' | "
                           "awk '$1 ~ /^.i/ && $3 == \"nvidia-graphics-drivers\" {print $2}'")
    assert left.split() == [], left
    assert sh(rigs.debian, "head -n1 /var/lib/rigforge/driver-replaced").startswith("535.261.03\tthe distribution")
    gone = sh(rigs.runfile, "for p in /usr/bin/nvidia-uninstall /usr/bin/nvidia-installer /var/lib/nvidia; do "
                            "[ -e $p ] && echo $p; done; ls /var/log/nvidia-uninstall.log")
    assert gone.split() == ["/var/log/nvidia-uninstall.log"], gone
    rigs.done.append("converged")


def test_the_next_run_plans_nothing_and_the_verify_suite_passes(rigs: Rigs) -> None:
    rigs.require("converged")
    assert_no_changes(rigs.inventory, "deploys/host.py")
    hosts = ",".join(f"paramiko://{host.name}" for host in rigs.hosts)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", f"--hosts={hosts}",
                           f"--ssh-config={Path(rigs.sandbox.state_dir) / 'ssh_config'}", *VERIFY_MODULES],
                          cwd=REPO_ROOT, capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_an_owners_gpu_process_blocks_the_serving_layer_and_is_left_running(rigs: Rigs) -> None:
    # The process is real (a unit of the owner's); that it holds 20 GiB of GPU memory is the stand-in
    # nvidia-smi's answer, in the real tool's CSV line, since no GPU exists here.
    rigs.require("converged")
    host = rigs.debian
    sh(host, "systemd-run --unit=owner-llm python3 -c 'import time; time.sleep(3600)'")
    pid = sh(host, "systemctl show -p MainPID --value owner-llm.service").strip()
    sh(host, f"echo '{pid}, python3, 20480 MiB' > {COMPUTE_APPS_FILE}")
    before = sh(host, SNAPSHOT)
    try:
        result = run_pyinfra(rigs.inventory, "deploys/serve.py", "--limit", host.name, check=False)
        log = _log(result)
        assert result.returncode != 0 and "Traceback" not in log, log[-3000:]
        (line,) = _lines(log, host, "already there: gpu-process:")
        print(line)  # the docs' real output line
        assert line.startswith(f"already there: gpu-process: pid {pid} (python3), 20480 MiB (owner-llm.service): "
                               "blocked: the engine cannot start"), line
        assert f"kill {pid} or stop its service" in line
        assert sh(host, SNAPSHOT) == before, "the refused serving layer changed the host"
        assert sh(host, "systemctl show -p MainPID --value owner-llm.service").strip() == pid
    finally:
        exec_in(host, f"systemctl stop owner-llm.service; rm -f {COMPUTE_APPS_FILE}")
