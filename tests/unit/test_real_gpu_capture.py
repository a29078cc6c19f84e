"""rigforge's facts, checks and takeover on the real outputs of a lent 2x H200 machine, and its run there as @local.

tests/fixtures/real-gpu/nvidia-h200-x2 (its README says how each file was made): Ubuntu 24.04 in a Firecracker VM
whose host provides the NVIDIA driver 580.159.04 (open): the module is loaded, no module file or package of it is
inside, its libraries are on a read-only mount of their own, and apt has cuda-compat-13-0 (built from
nvidia-graphics-drivers-580) installed. ``run/`` holds each step of ``measurements/real_gpu.py run`` there.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from rigforge.checks import run_checks, summary
from rigforge.checks.capture import read_capture
from rigforge.checks.driver_takeover import HOST, REFUSE, DriverFound, bystanders, driver_packages, plan_driver
from rigforge.checks.known_failures import find_known_failures
from rigforge.checks.takeover import driver_row
from rigforge.facts.driver import parse_driver_version
from rigforge.facts.driver_files import parse_driver_files
from rigforge.facts.installed import parse_driver_install
from rigforge.facts.logs import KnownFailureLogs
from rigforge.facts.packages import parse_boot_tools, parse_smi_version
from rigforge.facts.topology import parse_topology, worst_gpu_link
from rigforge.probe import probe_failures, probe_lines
from rigforge.profile.loader import load_profile
from tests.unit.test_takeover_rows import BARE, only

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real-gpu"
MACHINE = CAPTURES / "nvidia-h200-x2"
#: Both lent machines: the same VM kind and driver, 2x H200 (the first run) and 2x H100 80GB HBM3 (the second).
MACHINES = [CAPTURES / "nvidia-h200-x2", CAPTURES / "nvidia-h100-x2"]
RIG = load_profile("2x-pix")  # driver 595.45.04 open from NVIDIA's repository
each_machine = pytest.mark.parametrize("machine", MACHINES, ids=lambda path: path.name)


def text(name: str, machine: Path = MACHINE) -> str:
    return (machine / name).read_text()


def machine_driver(machine: Path = MACHINE) -> DriverFound:
    return DriverFound(install=parse_driver_install(text("fact-NvidiaDriverInstall.txt", machine)),
                       loaded=parse_driver_version(text("fact-NvidiaLoadedDriver.txt", machine)),
                       smi=parse_smi_version(text("fact-NvidiaSmiVersions.txt", machine)))


@each_machine
def test_the_driver_is_the_hosts_and_cuda_compat_is_not_it(machine: Path) -> None:
    found = machine_driver(machine)
    assert found.loaded is not None and (found.loaded.version, found.loaded.open_kernel_module) == ("580.159.04", True)
    assert "cuda-compat-13-0" in found.install.packages  # found by its source package, nvidia-graphics-drivers-580
    assert driver_packages(found) == []
    assert bystanders(found) == ["cuda-compat-13-0 580.95.05-0ubuntu1"]
    plan = plan_driver(RIG, found)
    assert (plan.action, list(plan.sources), plan.purge, plan.uninstaller) == (REFUSE, [HOST], (), None)
    assert plan.found == ("580.159.04", "open")


@each_machine
def test_the_row_names_no_package_as_the_driver(machine: Path) -> None:
    found = machine_driver(machine)
    row = only(driver_row(RIG, replace(BARE, driver_install=found.install, loaded_driver=found.loaded,
                                       smi=found.smi)))
    assert row.source.startswith(HOST)
    driver_part, _, others = row.source.partition("; not the driver: ")
    assert "cuda-compat" not in driver_part and others == "cuda-compat-13-0 580.95.05-0ubuntu1"
    assert row.blocking and "apt-get purge" not in row.why and "the driver is the host's" in row.why


def test_the_files_the_driver_has_here() -> None:
    # The machine's own lines: no modinfo and no module file; the libraries on the host's read-only mount, no owner.
    files = machine_driver().install.files
    assert files.modules == () and files.sources == () and files.module_owners == () and files.dkms == ()
    assert [(library.path, library.owners, library.mount) for library in files.libraries] == [
        ("/usr/local/nvidia/lib64/libcuda.so.580.159.04", (), "/usr/local/nvidia"),
        ("/usr/local/nvidia/lib64/libnvidia-ml.so.580.159.04", (), "/usr/local/nvidia")]
    assert "/usr/local/nvidia ro," in text("mounts-nvidia.txt")
    assert "dpkg-query: no path found matching pattern /usr/local/nvidia/lib64/libcuda.so.1" in text(
        "dpkg-S-userspace.txt")
    assert text("modinfo-nvidia.txt") == "" and "modinfo: not found" in text("modinfo-nvidia.txt.stderr")
    assert "nvidia 14299136 - - Live" in text("sys-module-nvidia.txt")  # loaded, though no file is here


# Hand-written lines of the same form (marked so: no such machine was at hand) for the other origins.
APT_MODULE = ("file\t/lib/modules/6.8.0-50-generic/kernel/nvidia-580-open/nvidia.ko\t"
              "linux-modules-nvidia-580-open-6.8.0-50-generic\n"
              "library\tlibcuda.so.1\t/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05\tlibnvidia-compute-580\t/\n")
DKMS_MODULE = ("file\t/lib/modules/6.8.0-50-generic/updates/dkms/nvidia.ko.zst\t\n"
               "source\t/usr/src/nvidia-580.95.05\tnvidia-kernel-source-580-open\n"
               "dkms\tnvidia/580.95.05, 6.8.0-50-generic, x86_64: installed\n")


def test_files_of_a_packaged_module_and_of_a_dkms_build() -> None:
    packaged = parse_driver_files(APT_MODULE)
    assert packaged.module_owners == ("linux-modules-nvidia-580-open-6.8.0-50-generic",)
    assert packaged.libraries[0].owners == ("libnvidia-compute-580",) and packaged.libraries[0].mount == "/"
    dkms = parse_driver_files(DKMS_MODULE)
    assert dkms.module_owners == ("nvidia-kernel-source-580-open",)
    assert parse_driver_files("file\t/lib/modules/6.8.0/kernel/nvidia.ko\t\n").module_owners == ()


def test_a_purge_lists_only_the_owners_of_the_module_files() -> None:
    # The machine's cuda-compat-13-0 beside a driver whose module a package owns: only that package is purged.
    policy = text("fact-NvidiaDriverInstall.txt").split("## module")[0].split("## policy", 1)[1]
    owner = ("linux-modules-nvidia-580-open-6.8.0-50-generic:\n  Installed: 6.8.0-50.51+1\n  Candidate: 6.8.0-50.51+1\n"
             "  Version table:\n *** 6.8.0-50.51+1 500\n        500 http://archive.ubuntu.com/ubuntu noble-updates/"
             "restricted amd64 Packages\n        100 /var/lib/dpkg/status\n")
    install = parse_driver_install(f"## files\n{APT_MODULE}## policy{policy}{owner}## module\n## runfile\n")
    found = DriverFound(install=install, loaded=machine_driver().loaded, smi=None)
    assert driver_packages(found) == ["linux-modules-nvidia-580-open-6.8.0-50-generic"]
    plan = plan_driver(RIG, found)
    assert plan.purge == ("linux-modules-nvidia-580-open-6.8.0-50-generic",)
    assert bystanders(found) == ["cuda-compat-13-0 580.95.05-0ubuntu1"]


@each_machine
def test_the_checks_on_the_capture_are_what_preflight_printed_there(machine: Path) -> None:
    checks = run_checks(RIG, read_capture(machine))
    printed = re.search(r"preflight @local: .*", text("run/preflight.txt", machine))
    assert printed is not None
    assert summary("@local", checks) == printed.group(0).strip()


@each_machine
def test_other_facts_read_the_machine(machine: Path) -> None:
    topology = parse_topology(text("nvidia-smi-topo-m.txt", machine))
    assert topology is not None and worst_gpu_link(topology) == "NV18"
    boot = parse_boot_tools(text("fact-BootEnvironment.txt", machine))
    assert boot.container == "docker" and not boot.update_initramfs and not boot.update_grub
    # The rig sends candidate lines only (harmless NVRM lines on the H100 machine): none is a known failure, and
    # none reads as an error that no signature knows.
    logs = KnownFailureLogs().process(text("fact-KnownFailureLogs.txt", machine).splitlines())
    assert find_known_failures(logs) == []


@each_machine
def test_the_probe_report_of_the_machine(machine: Path) -> None:
    report = json.loads(text("run/probe.txt", machine).splitlines()[1])
    assert probe_failures(report) == [] and report["ok"] is True
    assert any("GPU0<->GPU1" in line for line in probe_lines(report))


@each_machine
@pytest.mark.parametrize("step", ["preflight", "preflight-probe", "full-dry", "doctor", "verify", "probe"])
def test_no_step_of_the_run_there_crashed(machine: Path, step: str) -> None:
    assert not re.search(r"^Traceback", text(f"run/{step}.txt", machine), re.MULTILINE)


def test_the_run_there_probed_planned_and_named_the_drivers_origin() -> None:
    probed = text("run/preflight-probe.txt")
    probe_at = probed.index("probe: GPU0<->GPU1: peer access yes")
    assert probe_at < probed.index("already there: blocking check failed: nvidia-driver")  # before the stop
    assert "probe: read-only, so it runs whatever the tables above block" in probed
    planned = text("run/full-dry.txt")
    assert planned.count("a run stops here before any change (the dry run plans on)") == 5
    assert "Operation error" not in planned
    assert "    Service | Run rigforge-engine.service" in planned and "    Bench | " in planned  # every layer
    row = text("run/preflight.txt")
    assert "not the driver: cuda-compat-13-0 580.95.05-0ubuntu1): blocked: rigforge cannot replace it" in row
    assert "purge" not in row.split("already there: nvidia-driver")[1].split("\n")[0]
    doctor = text("run/doctor.txt")
    assert "| @local | kernel, engine, bench, driver | none |" in doctor and "exit status: 0" in doctor


def test_the_run_before_these_changes_named_cuda_compat_the_driver() -> None:
    # Kept for comparison: the same steps on the same kind of machine before the fixes (run-before/).
    before = text("run-before/preflight-probe.txt")
    assert "(an apt source no longer configured: cuda-compat-13-0 580.95.05-0ubuntu1): replace" in before
    assert "probe: GPU0<->GPU1" not in before
    assert "--> Operation error" in text("run-before/full-dry.txt")
