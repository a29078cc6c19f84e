"""What the tuning role promises: governor, sysctls, GPU settings and (switch rigs) ACS, after every boot.

Live kernel values are the machine's in a container host (read-only /proc/sys, no cpufreq): those checks
skip there with that reason; the files and units are checked everywhere.
"""

from __future__ import annotations

import pytest

from rigforge.facts.host import CpuGovernors
from rigforge.facts.packages import BootEnvironment
from rigforge.profile import Profile
from roles.tuning import ACS_UNIT, GPU_SETTINGS_UNIT, render_tuning_files


@pytest.fixture(scope="module")
def container(host) -> str | None:
    return BootEnvironment().process(host.run(BootEnvironment().command()).stdout.splitlines()).container


def test_files_are_the_profiles(host, profile: Profile) -> None:
    for path, content in render_tuning_files(profile).items():
        assert host.file(path).content_string == content, f"{path} differs from what the profile renders"


def test_governor(host, profile: Profile) -> None:
    if profile.tuning.cpu_governor is None:
        pytest.skip("the profile leaves the CPU governor alone")
    governors = CpuGovernors().process(host.run(CpuGovernors().command()).stdout.splitlines())
    if not governors:
        pytest.skip("no cpufreq on this host (VM, container or BIOS-controlled)")
    wrong = {cpu: gov for cpu, gov in governors.items() if gov != profile.tuning.cpu_governor}
    assert not wrong, f"CPUs not on {profile.tuning.cpu_governor}: {wrong}"


def test_sysctls(host, profile: Profile, container: str | None) -> None:
    if container:
        pytest.skip(f"{container} container host: /proc/sys is the machine's")
    for key, value in profile.tuning.sysctl.items():
        assert str(host.sysctl(key)) == str(value), f"{key} is {host.sysctl(key)}, profile says {value}"


def test_gpu_settings_unit(host, profile: Profile) -> None:
    if profile.gpus is None:
        pytest.skip(f"profile {profile.name} has no GPUs")
    unit = host.service(GPU_SETTINGS_UNIT)
    assert unit.is_enabled and unit.is_running, f"{GPU_SETTINGS_UNIT} did not run at boot"


def test_persistence_and_power_limit(host, profile: Profile, needs_gpu: None) -> None:
    assert profile.gpus is not None
    rows = host.check_output("nvidia-smi --query-gpu=persistence_mode,power.limit --format=csv,noheader,nounits")
    for row in rows.splitlines():
        mode, limit = (cell.strip() for cell in row.split(","))
        assert mode == ("Enabled" if profile.gpus.persistence_mode else "Disabled")
        if profile.gpus.power_limit_w:
            assert float(limit) == pytest.approx(profile.gpus.power_limit_w)


def test_acs_redirect_off(host, profile: Profile, container: str | None) -> None:
    if not profile.tuning.disable_acs:
        assert not host.file(f"/etc/systemd/system/{ACS_UNIT}").exists
        return
    assert host.service(ACS_UNIT).is_enabled
    if container:
        pytest.skip(f"{container} container host owns no PCI devices")
    redirecting = host.run("lspci -vvv | grep 'ACSCtl:' | grep -c -e 'ReqRedir+' -e 'CmpltRedir+'").stdout.strip()
    assert redirecting == "0", f"{redirecting} port(s) still redirect peer-to-peer traffic"
