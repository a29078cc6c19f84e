"""The "what is already there" rows: pure functions of the profile and the facts, on real captured outputs
where the thing exists on a machine here (tests/fixtures/installed/README.md), else on the facts' values."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rigforge.checks.docker_install import DockerRow
from rigforge.checks.driver_takeover import HOST, NVIDIA_REPO, RUNFILE, UNEXPLAINED, package_source
from rigforge.checks.takeover import (
    InstalledFacts,
    Row,
    blocking_rows,
    cuda_row,
    docker_rows,
    driver_row,
    gpu_process_rows,
    port_rows,
    takeover_lines,
    takeover_rows,
)
from rigforge.facts.driver import parse_driver_version
from rigforge.facts.holders import NO_HOLDERS, Holder, Holders, LockHolder, parse_compute_apps, parse_listeners
from rigforge.facts.installed import (
    NO_CUDA,
    NO_DRIVER_INSTALL,
    DriverInstall,
    PackageOrigin,
    RunfileInstall,
    parse_cuda_trees,
    parse_driver_install,
)
from rigforge.facts.packages import parse_smi_version
from rigforge.profile.loader import load_profile

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
H100 = FIXTURES / "installed" / "nvidia-h100-x1"
CI = FIXTURES / "installed" / "ci-debian12"
RIG = load_profile("2x-pix")  # driver 595.45.04 open, CUDA 13.2, engine port 8000
SANDBOX = load_profile("sandbox")
BARE = InstalledFacts(driver_install=NO_DRIVER_INSTALL, loaded_driver=None, smi=None, cuda=NO_CUDA,
                      gpu_processes=NO_HOLDERS, port_listeners=NO_HOLDERS, lock_holders=())
NVIDIA_URL = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64"
DEBIAN_NON_FREE = "http://deb.debian.org/debian bookworm/non-free"


def packages(**versions: tuple[str, str]) -> DriverInstall:
    """Driver packages: name=(version, origin)."""
    return DriverInstall(packages={name.replace("_", "-"): PackageOrigin(version, (origin, "/var/lib/dpkg/status"))
                                   for name, (version, origin) in versions.items()}, module=None, runfile=None)


def only(rows: list[Row]) -> Row:
    assert len(rows) == 1, rows
    return rows[0]


def test_bare_host_blocks_nothing() -> None:
    components = ["nvidia-driver", "cuda", "secure-boot", "docker", "gpu-process", "engine-port", "apt-lock"]
    # The GPU profile's security trade-offs come last (tests/unit/test_tradeoffs.py); the sandbox makes none.
    for profile, tradeoffs in ((RIG, 3), (SANDBOX, 0)):
        rows = takeover_rows(profile, BARE)
        assert [row.component for row in rows] == components + ["trade-off"] * tradeoffs
        assert not [row for row in rows if row.blocking]
    driver, cuda = takeover_rows(RIG, BARE)[:2]
    assert (driver.found, driver.action) == ("none", "install 595.45.04 (open)")
    assert (cuda.found, cuda.action) == ("none; no /usr/local/cuda", "install 13.2")
    assert only(driver_row(SANDBOX, BARE)).action == "leave it"


def test_driver_from_nvidias_repository_is_kept_or_upgraded() -> None:
    same = replace(BARE, driver_install=packages(nvidia_open=("595.45.04-1", NVIDIA_URL)))
    row = only(driver_row(RIG, same))
    assert (row.found, row.action, row.blocking) == ("595.45.04 (open)", "keep", False)
    assert row.source.startswith(NVIDIA_REPO)
    older = replace(BARE, driver_install=packages(nvidia_open=("590.48.01-1", NVIDIA_URL)))
    row = only(driver_row(RIG, older))
    assert (row.action, row.blocking) == ("upgrade to 595.45.04 (open)", False)


def test_the_other_flavor_from_nvidias_repository_blocks() -> None:
    proprietary = replace(BARE, driver_install=packages(cuda_drivers=("595.45.04-1", NVIDIA_URL)))
    row = only(driver_row(RIG, proprietary))
    assert (row.found, row.action, row.blocking, row.layer) == ("595.45.04 (proprietary)",
                                                               "replace, with --data replace_driver=true", True, "host")
    assert "it would run apt-get purge of 1 package" in row.why


def test_debians_own_driver_blocks() -> None:
    debian = replace(BARE, driver_install=packages(nvidia_driver=("535.261.03-1", DEBIAN_NON_FREE),
                                                   nvidia_kernel_dkms=("535.261.03-1", DEBIAN_NON_FREE)))
    row = only(driver_row(RIG, debian))
    assert row.blocking and row.action == "replace, with --data replace_driver=true"
    assert row.source.startswith("the distribution (deb.debian.org/debian bookworm): nvidia-driver 535")


def test_runfile_driver_blocks() -> None:
    module = parse_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.54.03  Tue Jun  6 2023\n")
    runfile = replace(BARE, loaded_driver=module,
                      driver_install=DriverInstall({}, None, RunfileInstall(True, True, "535.54.03")))
    row = only(driver_row(RIG, runfile))
    assert (row.found, row.blocking) == ("535.54.03 (proprietary)", True)
    assert row.source == f"{RUNFILE}: nvidia-uninstall, nvidia-installer.log"
    assert "it would run /usr/bin/nvidia-uninstall --silent" in row.why


def test_a_loaded_module_with_no_file_here_is_the_hosts_and_blocks() -> None:
    # The H100 machine: the host's module is loaded, nothing inside installed it (no module file either).
    loaded = parse_driver_version((FIXTURES / "gpu" / "nvidia-h100-x1" / "proc-driver-nvidia-version.txt").read_text())
    row = only(driver_row(RIG, replace(BARE, loaded_driver=loaded)))
    assert (row.found, row.blocking) == ("580.159.04 (open)", True)
    assert row.source.startswith(HOST)


def test_package_source_without_an_apt_source() -> None:
    status = ("/var/lib/dpkg/status",)
    assert package_source("nvidia-open", status, "") == NVIDIA_REPO
    assert package_source("nvidia-driver-580-open", status, "") == "the distribution (Ubuntu)"
    assert package_source("linux-modules-nvidia-580-server-6.8.0-50-generic", status, "") == "the distribution (Ubuntu)"
    assert package_source("nvidia-kernel-dkms", status, "") == "an apt source no longer configured"
    assert package_source("nvidia-open", ("http://127.0.0.1:8123/debian12/x86_64",), "http://127.0.0.1:8123/") == \
        NVIDIA_REPO


def test_cuda_rows_on_real_trees() -> None:
    packaged = replace(BARE, cuda=parse_cuda_trees((H100 / "fact-CudaToolkits.txt").read_text()))
    row = only(cuda_row(RIG, packaged))
    assert row.found == "13.0; /usr/local/cuda -> /usr/local/cuda-13.0" and row.action == "install 13.2"
    assert "13.0 left untouched" in row.why and not row.blocking
    same = RIG.model_copy(update={"cuda": RIG.cuda.model_copy(update={"version": "13.0"})})
    assert only(cuda_row(same, packaged)).action == "keep"
    unowned = replace(BARE, cuda=parse_cuda_trees((CI / "fact-CudaToolkits.txt").read_text()))
    row = only(cuda_row(same, unowned))
    assert (row.action, row.blocking) == ("blocked: apt would write over it", True)
    assert row.source == "13.0: no package owns it"


def test_a_foreign_gpu_process_blocks_naming_pid_process_memory() -> None:
    held = replace(BARE, gpu_processes=parse_compute_apps((H100 / "fact-GpuComputeProcesses-held.txt").read_text()))
    row = only(gpu_process_rows(RIG, held))
    assert (row.found, row.blocking, row.layer) == ("pid 702 (python3), 1542 MiB", True, "serving")
    assert "kill 702" in row.why


def test_the_engines_own_gpu_process_does_not_block() -> None:
    engine = Holders((Holder(4242, "python3", "/system.slice/docker-abc.scope", 70000.0),), engine_container_id="abc")
    row = only(gpu_process_rows(RIG, replace(BARE, gpu_processes=engine)))
    assert (row.found, row.blocking) == ("1 of rigforge's engine", False)


def test_a_foreign_port_holder_blocks_with_the_known_failures_fix() -> None:
    profile = RIG.model_copy(update={"engine": RIG.engine.model_copy(update={"port": 18123})})
    held = replace(BARE, port_listeners=parse_listeners((CI / "fact-PortListeners-18123-held.txt").read_text()))
    row = only(port_rows(profile, held))
    assert (row.found, row.blocking, row.layer) == ("18123: pid 11083 (python3) on 127.0.0.1:18123", True, "serving")
    assert "ss -ltnp 'sport = :18123'" in row.why and "engine.port" in row.why
    own = Holders((Holder(9, "python3", "/system.slice/rigforge-engine.service", address="127.0.0.1:18123"),))
    row = only(port_rows(profile, replace(BARE, port_listeners=own)))
    assert (row.found, row.blocking) == ("18123: rigforge's engine", False)


def test_apt_lock_is_informational() -> None:
    rows = takeover_rows(RIG, replace(BARE, lock_holders=(LockHolder(812, "unattended-upgr"),)))
    row = next(row for row in rows if row.component == "apt-lock")
    assert (row.found, row.blocking) == ("held by unattended-upgr (pid 812)", False)


def test_blocking_rows_only_for_the_layers_a_deploy_changes() -> None:
    facts = replace(BARE, gpu_processes=parse_compute_apps((H100 / "fact-GpuComputeProcesses-held.txt").read_text()),
                    driver_install=packages(nvidia_driver=("535.261.03-1", DEBIAN_NON_FREE)))
    rows = takeover_rows(RIG, facts)
    assert [row.component for row in blocking_rows(rows, ("host",))] == ["nvidia-driver"]
    assert [row.component for row in blocking_rows(rows, ("serving",))] == ["gpu-process"]
    assert blocking_rows(rows, ()) == []


def test_table_lines() -> None:
    lines = takeover_lines(takeover_rows(SANDBOX, BARE))
    assert [cell.strip() for cell in lines[0].split(" | ")] == ["component", "found", "from where", "rigforge will",
                                                               "why"]
    assert all(line == line.rstrip() for line in lines)
    assert any(line.startswith("engine-port") and "free" in line for line in lines)


def test_flavor_from_package_names_when_nothing_is_loaded() -> None:
    cases = {"nvidia_kernel_dkms": "proprietary", "nvidia_open_kernel_dkms": "open", "nvidia_driver_580_open": "open",
             "nvidia_driver_580": "proprietary", "cuda_drivers": "proprietary"}
    for name, flavor in cases.items():
        facts = replace(BARE, driver_install=packages(**{name: ("580.95.05-1", DEBIAN_NON_FREE)}))
        assert only(driver_row(RIG, facts)).found == f"580.95.05 ({flavor})", name


def test_a_driver_only_nvidia_smi_shows_is_unexplained() -> None:
    # The lent H200 machine's nvidia-smi --version (its driver is the host's, nothing installed it inside).
    smi = parse_smi_version((FIXTURES / "host" / "nvidia-h200-x2" / "fact-NvidiaSmiVersions.txt").read_text())
    row = only(driver_row(RIG, replace(BARE, smi=smi)))
    assert (row.found, row.source, row.blocking) == ("580.159.04 (?)", f"{UNEXPLAINED}: nvidia-smi", True)


def test_debian_names_beside_nvidias_own_packages_are_nvidias() -> None:
    status = "/var/lib/dpkg/status"
    facts = replace(BARE, driver_install=packages(nvidia_open=("595.45.04-1", status),
                                                  nvidia_driver=("595.45.04-1", status)))
    row = only(driver_row(RIG, facts))
    assert (row.action, row.blocking) == ("keep", False)
    assert row.source == f"{NVIDIA_REPO}: nvidia-driver 595.45.04-1, nvidia-open 595.45.04-1"


def test_the_driver_rigforge_installed_is_kept() -> None:
    # A sandbox host after deploys/host.py with the stand-in NVIDIA repository (tests/fixtures/installed/README.md).
    captured = FIXTURES / "installed" / "sandbox-standin-repo"
    url = "http://127.0.0.1:8737/{distro}/{arch}/"
    profile = RIG.model_copy(update={"driver": RIG.driver.model_copy(
        update={"repo": RIG.driver.repo.model_copy(update={"url": url})})})
    install = parse_driver_install((captured / "fact-NvidiaDriverInstall.txt").read_text())
    assert install.packages["nvidia-open"].origins == ("http://127.0.0.1:8737/debian12/x86_64", "/var/lib/dpkg/status")
    cuda = parse_cuda_trees((captured / "fact-CudaToolkits.txt").read_text())
    facts = replace(BARE, driver_install=install, cuda=cuda)
    driver, toolkit = takeover_rows(profile, facts)[:2]
    assert (driver.found, driver.action, driver.blocking) == ("595.45.04 (open)", "keep", False)
    assert driver.source.startswith(f"{NVIDIA_REPO}: nvidia-driver-cuda 595.45.04-1")
    assert (toolkit.found, toolkit.action) == ("13.2; no /usr/local/cuda", "keep")


def test_docker_row_is_the_container_roles_judgement_and_blocks_the_container_layer() -> None:
    other = DockerRow("Docker", "/usr/bin/docker, owned by no package; engine not running", "installed by hand",
                      "stop: rigforge does not install docker.io over another Docker", "it would shadow it",
                      blocking=True)
    row = only(docker_rows(RIG, replace(BARE, docker=other)))
    assert (row.component, row.found, row.blocking, row.layer) == ("docker", other.found, True, "container")
    assert blocking_rows([row], ("host",)) == [] and blocking_rows([row], ("container",)) == [row]
    assert only(docker_rows(RIG, BARE)).action == "leave it"  # no Docker judged: the profile manages none
