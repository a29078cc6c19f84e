"""The host layer on a real sandbox host with the 2x-pix profile: dry run, convergence, reboots only when
needed, a file the profile does not want (removed only when rigforge wrote it), a driver upgrade, a kernel
update that left the next boot without the NVIDIA module.

Real here: the Debian 12 systemd host, apt with a signed repository and a pinned, held driver, the
GRUB drop-in and update-grub (the sandbox image diverts grub-probe so grub-mkconfig can map the
container's root), update-initramfs, systemd units, ``systemctl reboot`` (the container's systemd
really restarts) and pyinfra reconnecting after it.

STAND-INS (tests/standins/nvidia_cuda_repo.py), because NVIDIA's repository and GPUs cannot exist here:
the apt repository's packages (NVIDIA's names and versions, stand-in contents), its key (made per
run; the profile override pins its fingerprint), the "kernel module" (a version file published to
/run at boot) and nvidia-smi (answers from that file); kernels, headers and DKMS (tests/standins/kernels.py:
a module "built" per kernel that modinfo reads like a real one).

The kernel command line: a container host runs on the machine's kernel, so /proc/cmdline can never
hold the profile's parameters. The reboot step detects the container and skips that one check, with a
printed note, instead of this test switching anything off: the boot-affecting *changes* still reboot
the host (for real), and the parameters are checked in the grub.cfg update-grub wrote.

The tests share one host and run in file order, each step building on the previous one (about two
minutes in all); a failed step skips the rest.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyinfra_run import REPO_ROOT, PyinfraResult, assert_no_changes, changed_ops, run_pyinfra

from rigforge.facts.managed import MARKER_TEXT
from rigforge.operations.nvidia_apt import RepoPlatform
from rigforge.profile.loader import load_profile
from rigforge.sandbox import SandboxHost, boot_token, exec_in
from roles.host import render_host_files
from roles.nccl import NCCL_CONF
from roles.tuning import ACS_SCRIPT
from tests.standins.kernels import UPDATE_KERNEL
from tests.standins.nvidia_cuda_repo import build_repo, repo_paths, serve_in_host

if TYPE_CHECKING:
    from conftest import Sandbox

HOST_DEPLOY = "deploys/host.py"
PROFILE = "2x-pix"
OLD_DRIVER, NEW_DRIVER = "590.48.01", "595.45.04"
VERIFY_MODULES = [f"tests/verify/test_{name}.py" for name in ("driver", "cuda", "boot", "modprobe", "tuning", "nccl")]
GRAPH_XML = load_profile(PROFILE).nccl.graph_path  # type: ignore[union-attr]
OLD_GRAPH_LINE = f"NCCL_GRAPH_FILE={GRAPH_XML}"
PARAMS = ["pci=noacs", "iommu=pt", "mitigations=off", "pcie_aspm=off", "pcie_port_pm=off"]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# What may change on the host in a dry run: nothing under these, and no package or hold.
SNAPSHOT = (
    "find /etc /boot /usr/local /var/lib/apt/lists -xdev -printf '%p %m %U %G %s %T@\\n' | sort | sha256sum; "
    "find /etc /boot /usr/local -xdev -type f -exec sha256sum {} + | sort | sha256sum; "
    "dpkg -l | sha256sum; apt-mark showhold; ls /run/rigforge 2>/dev/null; true"
)


@dataclass
class Rig:
    """The shared sandbox host, its stand-in repository and the steps done so far."""

    sandbox: Sandbox
    host: SandboxHost
    overrides: dict
    workdir: Path
    done: list[str] = field(default_factory=list)

    def inventory(self, name: str, **changes: object) -> Path:
        """An inventory for the host with the base overrides plus ``changes`` (top-level profile sections)."""
        return self.sandbox.write_inventory(self.workdir / f"{name}.py", [self.host], PROFILE,
                                            {**self.overrides, **changes})

    def require(self, step: str) -> None:
        if step not in self.done:
            pytest.skip(f"needs the earlier step {step!r}, which did not pass")

    def run(self, inventory: Path, deploy: str = HOST_DEPLOY, *args: str, check: bool = True) -> PyinfraResult:
        return run_pyinfra(inventory, deploy, *args, check=check)

    def sh(self, command: str) -> str:
        proc = exec_in(self.host, command)
        assert proc.returncode == 0, f"{command}: {proc.stderr}"
        return proc.stdout


def _driver(version: str, repo_overrides: dict) -> dict:
    return {**repo_overrides["driver"], "version": version}


@pytest.fixture(scope="module")
def rig(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Rig:
    host = sandbox.fresh_host("hostroles")
    repo = build_repo(tmp_path_factory.mktemp("standin-repo"))
    serve_in_host(repo, host.container)
    return Rig(sandbox, host, repo.profile_overrides(OLD_DRIVER), tmp_path_factory.mktemp("inventories"))


def _op(result: PyinfraResult, name_part: str) -> dict:
    operations = (result.data or {})["results"]["operations"]
    matches = [op for op in operations if name_part in op["name"]]
    assert len(matches) == 1, f"{name_part!r} matches {[op['name'] for op in matches]}"
    return matches[0]


def _upgraded(rig: Rig) -> Path:
    """The inventory of the last steps: shorter kernel parameters, an NCCL variable, the new driver."""
    return rig.inventory("upgrade", boot={"kernel_params": PARAMS}, nccl={"env": {"NCCL_P2P_LEVEL": "SYS"}},
                         driver=_driver(NEW_DRIVER, rig.overrides))


def _reboots(result: PyinfraResult) -> int:
    return result.stderr.count("rebooted; back after")


def _platform() -> RepoPlatform:
    return RepoPlatform("debian12", repo_paths(os.uname().machine)[1])


def test_dry_diff_on_a_fresh_host_shows_every_file_and_changes_nothing(rig: Rig) -> None:
    inventory = rig.inventory("dry")
    before = rig.sh(SNAPSHOT)
    result = run_pyinfra(inventory, HOST_DEPLOY, "--diff", dry=True)
    assert rig.sh(SNAPSHOT) == before, "the dry run changed the host"

    log = ANSI.sub("", result.stderr)
    profile = load_profile(PROFILE, rig.overrides)
    for path, content in render_host_files(profile, _platform()).items():
        assert f"Will create {path}" in log, f"the dry run does not show {path}"
        missing = [line for line in content.splitlines() if line.strip() and line not in log]
        assert not missing, f"the diff of {path} lacks {missing[:3]}"
    changed = [op["name"] for op in result.plan if op["hosts_with_change"]]
    assert any("Reboot if needed" in name for name in changed), "the plan does not show the coming reboot"
    rig.done.append("dry")


def test_fresh_host_converges_with_exactly_one_reboot(rig: Rig) -> None:
    token = boot_token(rig.host)
    result = rig.run(rig.inventory("converge"))
    assert boot_token(rig.host) != token and _reboots(result) == 1
    assert "reboot needed because " in result.stderr
    assert f"DRIVER version      : {OLD_DRIVER}" in rig.sh("nvidia-smi --version")
    assert rig.sh("apt-mark showhold").split() == ["nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-open",
                                                   "nvidia-persistenced"]
    assert "pci=noacs,realloc iommu=pt mitigations=off pcie_aspm=off pcie_port_pm=off" in rig.sh(
        "grep -m1 '^[[:space:]]*linux' /boot/grub/grub.cfg")
    rig.done.append("converged")


def test_second_run_changes_nothing_and_does_not_reboot(rig: Rig) -> None:
    rig.require("converged")
    inventory = rig.inventory("converge")
    plan = assert_no_changes(inventory, HOST_DEPLOY)
    assert not [op["name"] for op in plan.plan if op["hosts_with_conditional_change"]]
    token = boot_token(rig.host)
    result = rig.run(inventory)
    assert boot_token(rig.host) == token and _reboots(result) == 0
    assert changed_ops(result) == []  # the deploy lock's take and release aside, nothing ran
    rig.done.append("idempotent")


def test_verify_modules_pass_on_the_converged_host(rig: Rig) -> None:
    rig.require("idempotent")
    proc = _verify(rig, *VERIFY_MODULES)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_a_file_the_profile_does_not_want_goes_only_when_rigforge_wrote_it(rig: Rig) -> None:
    rig.require("idempotent")
    # 2x-pix has no ACS script and no graph XML: one left by an earlier profile carries rigforge's header,
    # the other is a file of the owner's that happens to have the name.
    rig.sh(f"printf '#!/bin/sh\\n# {MARKER_TEXT}\\n' > {ACS_SCRIPT}")
    rig.sh(f"printf '<system version=\"1\"/>\\n' > {GRAPH_XML}")
    result = rig.run(rig.inventory("converge"))
    assert _op(result, f"Remove {ACS_SCRIPT}")["success"] == [rig.host.name]
    assert _op(result, f"Remove {GRAPH_XML}")["no_change"] == [rig.host.name]
    assert f"{GRAPH_XML} exists but was not written by rigforge; left in place" in result.stderr
    assert rig.sh(f"cat {GRAPH_XML}; test ! -e {ACS_SCRIPT} && echo gone") == '<system version="1"/>\ngone\n'
    rig.sh(f"rm {GRAPH_XML}")


def test_one_kernel_parameter_changed_updates_grub_once_and_reboots_once(rig: Rig) -> None:
    rig.require("idempotent")
    token = boot_token(rig.host)
    result = rig.run(rig.inventory("kernel-param", boot={"kernel_params": PARAMS}))
    assert boot_token(rig.host) != token and _reboots(result) == 1
    assert _op(result, "Update GRUB")["success"] == [rig.host.name]
    assert _op(result, "Update the initramfs")["no_change"] == [rig.host.name]
    assert "because the kernel parameters in /etc/default/grub.d/99-rigforge.cfg changed" in result.stderr
    assert " pci=noacs iommu=pt" in rig.sh("grep -m1 '^[[:space:]]*linux' /boot/grub/grub.cfg")
    rig.done.append("kernel-param")


def test_only_an_nccl_variable_changed_no_reboot_no_initramfs(rig: Rig) -> None:
    rig.require("kernel-param")
    token = boot_token(rig.host)
    result = rig.run(rig.inventory("nccl", boot={"kernel_params": PARAMS}, nccl={"env": {"NCCL_P2P_LEVEL": "SYS"}}))
    assert boot_token(rig.host) == token and _reboots(result) == 0
    assert _op(result, "Update the initramfs")["no_change"] == [rig.host.name]
    assert _op(result, "Update GRUB")["no_change"] == [rig.host.name]
    assert _op(result, "Reboot if needed")["no_change"] == [rig.host.name]
    assert "NCCL_P2P_LEVEL=SYS" in rig.sh("cat /etc/nccl.conf /etc/rigforge/engine.env")
    rig.done.append("nccl")


def test_a_graph_line_left_in_nccl_conf_is_removed_and_nothing_else_moves(rig: Rig) -> None:
    # A rig provisioned while rigforge still wrote NCCL_GRAPH_FILE into /etc/nccl.conf too (its template put the
    # line last; the 8x-turin golden file ended with it): every NCCL program on such a rig loads the 8-GPU graph
    # and fails on fewer GPUs (tests/fixtures/nccl/). The line is added to this host's rigforge-written file as
    # that template wrote it; the 2x-pix profile keeps the rest of the file what the host layer wrote.
    rig.require("nccl")
    inventory = rig.inventory("nccl", boot={"kernel_params": PARAMS}, nccl={"env": {"NCCL_P2P_LEVEL": "SYS"}})
    converged = rig.sh(f"cat {NCCL_CONF}")
    rig.sh(f"printf '{OLD_GRAPH_LINE}\\n' >> {NCCL_CONF}")

    # The preflight check and the verify suite both see it (their fix: the host layer).
    verify = _verify(rig, "tests/verify/test_gpus.py", "tests/verify/test_nccl.py", "-k",
                     "nccl-conf or graph_file_reaches_the_engine_alone")
    assert verify.returncode == 1 and "2 failed" in verify.stdout, verify.stdout[-3000:]
    assert f"nccl-conf: expected no NCCL_GRAPH_FILE in {NCCL_CONF}, found {OLD_GRAPH_LINE} (rigforge's file)" in (
        verify.stdout)

    # The dry run shows that one line going, and nothing else of the file or the host.
    dry = run_pyinfra(inventory, HOST_DEPLOY, "--diff", dry=True)
    assert changed_ops(dry) == [f"Host layer | NCCL and engine environment | Write {NCCL_CONF}"]
    log = ANSI.sub("", dry.stderr)
    (rig.workdir / "graph-line-dry-run.log").write_text(log)  # kept for a look
    diff = log.split(f"Will modify {NCCL_CONF}", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.strip()[2:] for line in diff if re.match(r"\s*[-+] ", line)] == [OLD_GRAPH_LINE], diff
    assert rig.sh(f"tail -n1 {NCCL_CONF}").strip() == OLD_GRAPH_LINE, "the dry run changed the file"

    result = rig.run(inventory)
    assert _reboots(result) == 0 and changed_ops(result) == [
        f"Host layer | NCCL and engine environment | Write {NCCL_CONF}"]
    assert rig.sh(f"cat {NCCL_CONF}") == converged
    assert_no_changes(inventory, HOST_DEPLOY)


def test_driver_upgrade_rehold_pending_reboot_and_one_reboot(rig: Rig) -> None:
    rig.require("nccl")
    inventory = _upgraded(rig)
    token = boot_token(rig.host)
    # Reboots forbidden: the upgrade happens, the deploy fails and says why a reboot is required. (The host
    # layer upgrades the driver the profile names; deploys/driver_update.py, which also benches the engine
    # before and after, is test_driver_rollout.py's.)
    refused = rig.run(inventory, HOST_DEPLOY, "--data", "allow_reboot=false", check=False)
    assert refused.returncode != 0 and boot_token(rig.host) == token
    log = ANSI.sub("", refused.stderr)
    assert (f"reboot required because the NVIDIA driver package ({NEW_DRIVER}) changed; NVIDIA driver {NEW_DRIVER} "
            "is installed but it is not loaded (nvidia-smi: Failed to initialize NVML: Driver/library version "
            "mismatch)") in log
    held = rig.sh("dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' 'nvidia-*'").splitlines()
    assert sorted(held) == [f"{name} {NEW_DRIVER}-1 hi " for name in (
        "nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-open", "nvidia-persistenced")]

    # Reboots allowed: the pending reboot (remembered in /run) happens once; the new driver loads.
    result = rig.run(inventory)
    assert boot_token(rig.host) != token and _reboots(result) == 1
    assert _op(result, "Install the NVIDIA open driver")["no_change"] == [rig.host.name]
    assert f"DRIVER version      : {NEW_DRIVER}" in rig.sh("nvidia-smi --version")
    assert_no_changes(inventory, HOST_DEPLOY)
    rig.done.append("upgraded")


def test_a_kernel_update_without_headers_is_caught_and_fixed_without_a_reboot(rig: Rig) -> None:
    # The most common way a rig "loses" its GPUs: an unattended upgrade installs a kernel image alone
    # (no headers), its postinst runs DKMS's hook, which builds nothing, and update-grub makes it the
    # next boot. Stand-ins: the kernel, headers and DKMS (tests/standins/kernels.py).
    rig.require("upgraded")
    inventory = _upgraded(rig)
    rig.sh(f"DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-image-{UPDATE_KERNEL} >/dev/null 2>&1")
    assert f"/boot/vmlinuz-{UPDATE_KERNEL} " in rig.sh("grep -m1 '^[[:space:]]*linux' /boot/grub/grub.cfg")
    fix = f"apt-get install linux-headers-{UPDATE_KERNEL} && dkms autoinstall -k {UPDATE_KERNEL}"

    preflight = ANSI.sub("", rig.run(inventory, "deploys/preflight.py", "--data", "skip_preflight=true").stderr)
    (rig.workdir / "preflight-after-kernel-update.log").write_text(preflight)  # kept for a look
    row = next(line for line in preflight.splitlines() if "kernel-module" in line)  # the table wraps its cells
    assert f"| {UPDATE_KERNEL} (next boot" in row and "| warn" in row and f"linux-headers-{UPDATE_KERNEL}" in row, row
    verify = _verify(rig, "tests/verify/test_gpus.py", "-k", "kernel-module")
    assert verify.returncode == 1, verify.stdout[-3000:]
    assert f"{UPDATE_KERNEL} (next boot, GRUB default '0'): no nvidia module" in verify.stdout and fix in verify.stdout

    plan = run_pyinfra(inventory, HOST_DEPLOY, dry=True)
    assert sorted(changed_ops(plan)) == [
        f"Host layer | NVIDIA driver | Build the NVIDIA {NEW_DRIVER} module for the running and next-boot kernels",
        "Host layer | NVIDIA driver | Install the headers of the kernels that need the NVIDIA module"]
    token = boot_token(rig.host)
    result = rig.run(inventory)
    assert boot_token(rig.host) == token and _reboots(result) == 0  # the running kernel was never affected
    assert rig.sh(f"modinfo -k {UPDATE_KERNEL} -F version nvidia").strip() == NEW_DRIVER
    assert _verify(rig, "tests/verify/test_gpus.py", "-k", "kernel-module").returncode == 0
    assert_no_changes(inventory, HOST_DEPLOY)


def _verify(rig: Rig, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                           f"--hosts=paramiko://{rig.host.name}",
                           f"--ssh-config={Path(rig.sandbox.state_dir) / 'ssh_config'}", *args],
                          cwd=REPO_ROOT, capture_output=True, text=True, check=False, timeout=600)
