"""Parsers of the "what is already there" facts, on real captured outputs (tests/fixtures/installed/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rigforge.facts.holders import (
    DpkgLockHolders,
    GpuComputeProcesses,
    Holder,
    LockHolder,
    PortListeners,
    is_engine,
    parse_compute_apps,
    parse_listeners,
    parse_lock_holders,
)
from rigforge.facts.installed import (
    NO_CUDA,
    NO_DRIVER_INSTALL,
    CudaToolkits,
    NvidiaDriverInstall,
    PackageOrigin,
    parse_apt_policy,
    parse_cuda_trees,
    parse_driver_install,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "installed"
H100 = FIXTURES / "nvidia-h100-x1"
CI = FIXTURES / "ci-debian12"


def read(path: Path) -> str:
    return path.read_text()


def test_apt_policy_names_the_source_of_each_installed_version() -> None:
    packages = parse_apt_policy(read(CI / "apt-cache-policy-docker.io-debootstrap.txt"))
    assert packages == {
        "docker.io": PackageOrigin("20.10.24+dfsg1-1+deb12u1+b6",
                                   ("http://deb.debian.org/debian bookworm/main", "/var/lib/dpkg/status")),
        "debootstrap": PackageOrigin("1.0.128+nmu2+deb12u2",
                                     ("http://deb.debian.org/debian bookworm/main", "/var/lib/dpkg/status")),
    }


def test_apt_policy_keeps_only_the_installed_versions_sources() -> None:
    # apt-cache policy's layout (apt 2.6) for a flat repository and a version no source offers any more.
    text = ("nvidia-open:\n  Installed: 590.48.01-1\n  Candidate: 595.45.04-1\n  Version table:\n"
            "     595.45.04-1 500\n        500 https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64"
            "  Packages\n *** 590.48.01-1 100\n        100 /var/lib/dpkg/status\n"
            "nvidia-smi:\n  Installed: (none)\n  Candidate: 535.261.03-1\n")
    assert parse_apt_policy(text) == {"nvidia-open": PackageOrigin("590.48.01-1", ("/var/lib/dpkg/status",))}


def test_no_driver_anywhere_reads_as_none() -> None:
    # The H100 machine's driver is its host's: nothing inside the container explains it.
    assert parse_driver_install(read(H100 / "fact-NvidiaDriverInstall.txt")) == NO_DRIVER_INSTALL
    assert parse_driver_install(read(CI / "fact-NvidiaDriverInstall.txt")) == NO_DRIVER_INSTALL
    assert NvidiaDriverInstall().process([]) == NO_DRIVER_INSTALL


def test_module_file_and_runfile_traces() -> None:
    # The command's sections as a .run install leaves them (module outside any package's files).
    text = ("## policy\n## module\nfilename: /lib/modules/6.1.0-28-amd64/kernel/drivers/video/nvidia.ko\n"
            "license: NVIDIA\nversion: 535.54.03\nowner: \n## runfile\n/usr/bin/nvidia-uninstall\n"
            "/var/log/nvidia-installer.log\ninstaller version: 535.54.03\n")
    install = parse_driver_install(text)
    assert install.module is not None and install.module.flavor == "proprietary" and install.module.owner == ""
    assert install.runfile is not None and install.runfile.uninstaller and install.runfile.version == "535.54.03"
    open_module = parse_driver_install("## module\nfilename: /x/nvidia.ko\nlicense: Dual MIT/GPL\nversion: 1\n")
    assert open_module.module is not None and open_module.module.flavor == "open" and open_module.runfile is None


def test_cuda_trees_packaged_and_unowned() -> None:
    packaged = parse_cuda_trees(read(H100 / "fact-CudaToolkits.txt"))
    assert packaged.link == "/usr/local/cuda-13.0"
    (tree,) = packaged.trees
    assert tree.version == "13.0" and "cuda-nvcc-13-0" in tree.packages and not tree.runfile
    unowned = parse_cuda_trees(read(CI / "fact-CudaToolkits.txt"))
    assert unowned.trees[0].packages == () and unowned.link == "/usr/local/cuda-13.0"
    assert parse_cuda_trees("") == NO_CUDA == CudaToolkits.default()
    runfile = parse_cuda_trees("tree\t/usr/local/cuda-12.4\t\trunfile\n")
    assert runfile.trees[0].runfile and runfile.link is None


def test_dpkg_lock_holder_from_proc_locks() -> None:
    assert parse_lock_holders(read(H100 / "fact-DpkgLockHolders-held.txt")) == (LockHolder(704, "python3"),)
    assert parse_lock_holders(read(CI / "fact-DpkgLockHolders-held.txt")) == (LockHolder(11084, "python3"),)
    assert parse_lock_holders(read(H100 / "fact-DpkgLockHolders.txt")) == ()
    assert DpkgLockHolders().process([]) == ()


def test_lock_waiters_and_other_files_are_not_holders() -> None:
    text = ("## inode 123241\n1: POSIX  ADVISORY  WRITE 561 fe:00:123241 0 EOF\n"
            "1: -> POSIX  ADVISORY  WRITE 900 fe:00:123241 0 EOF\n2: POSIX  ADVISORY  WRITE 77 fe:00:9123241 0 EOF\n"
            "## comm 561\nunattended-upgr\n")
    assert parse_lock_holders(text) == (LockHolder(561, "unattended-upgr"),)


def test_gpu_process_from_real_nvidia_smi() -> None:
    processes = parse_compute_apps(read(H100 / "fact-GpuComputeProcesses-held.txt"))
    assert processes.holders == (Holder(702, "python3", "/process_api/003780d85c7a983bd35871b88542085e", 1542.0),)
    assert parse_compute_apps(read(H100 / "fact-GpuComputeProcesses.txt")).holders == ()
    assert GpuComputeProcesses().process([]).holders == ()


def test_nvidia_smi_errors_are_not_processes() -> None:
    text = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    assert parse_compute_apps(text).holders == ()


def test_port_listener_from_real_ss() -> None:
    listeners = parse_listeners(read(CI / "fact-PortListeners-18123-held.txt"))
    assert listeners.holders == (Holder(11083, "python3", "/", address="127.0.0.1:18123"),)
    assert listeners.engine_container_id == ""
    assert parse_listeners(read(CI / "fact-PortListeners-18123-free.txt")).holders == ()
    assert PortListeners().process([]).holders == ()


def test_ss_without_root_shows_no_pid() -> None:
    listeners = parse_listeners("LISTEN 0 5 0.0.0.0:8000 0.0.0.0:*\n")
    assert listeners.holders == (Holder(0, "?", address="0.0.0.0:8000"),)


@pytest.mark.parametrize(("cgroup", "container", "engine"), [
    ("/system.slice/rigforge-engine.service", "", True),
    ("/system.slice/docker-0123abcd.scope/system.slice/rigforge-engine.service", "", True),  # a sandbox host
    ("/system.slice/docker-0123abcd.scope", "0123abcd", True),  # the engine container
    ("/system.slice/docker-ffff.scope", "0123abcd", False),  # an owner's container
    ("/system.slice/port-holder.service", "", False),
    ("", "", False),
])
def test_engine_is_told_by_its_cgroup(cgroup: str, container: str, engine: bool) -> None:
    assert is_engine(Holder(1, "python3", cgroup), "rigforge-engine.service", container) is engine


def test_commands_exit_zero_shapes() -> None:
    for command in (NvidiaDriverInstall().command(), CudaToolkits().command(), DpkgLockHolders().command(),
                    GpuComputeProcesses().command(), PortListeners().command(port=8000)):
        assert command.rstrip().endswith("true")
    assert "sport = :8000" in PortListeners().command(port=8000)
