"""What the boot role promises: the profile's kernel parameters in GRUB, and running.

A container host runs on the machine's kernel: its /proc/cmdline is not its own, so the running-kernel
check skips there (with that reason); the GRUB files are still checked.
"""

from __future__ import annotations

import pytest

from rigforge.facts.host import cmdline_has, parse_cmdline
from rigforge.facts.packages import BootEnvironment
from rigforge.profile import Profile
from roles.boot import GRUB_DROPIN, render_boot_files


@pytest.fixture(scope="module")
def params(profile: Profile) -> list[str]:
    if not profile.boot.kernel_params:
        pytest.skip(f"profile {profile.name} sets no kernel parameters")
    return profile.boot.kernel_params


def test_grub_dropin_is_the_profiles(host, profile: Profile, params: list[str]) -> None:
    assert host.file(GRUB_DROPIN).content_string == render_boot_files(profile)[GRUB_DROPIN]


def test_grub_cfg_boots_with_the_parameters(host, params: list[str]) -> None:
    grub_cfg = host.file("/boot/grub/grub.cfg")
    if not grub_cfg.exists:
        pytest.skip("no /boot/grub/grub.cfg (not a GRUB BIOS/EFI layout this check knows)")
    linux_lines = [line.split() for line in grub_cfg.content_string.splitlines() if line.strip().startswith("linux")]
    assert linux_lines, "grub.cfg has no linux entries"
    for words in linux_lines:
        assert all(cmdline_has(tuple(words), param) for param in params), f"grub.cfg entry lacks a parameter: {words}"


def test_running_kernel_has_the_parameters(host, params: list[str]) -> None:
    tools = BootEnvironment().process(host.run(BootEnvironment().command()).stdout.splitlines())
    if tools.container:
        pytest.skip(f"{tools.container} container host: /proc/cmdline is the machine's kernel's")
    running = parse_cmdline(host.file("/proc/cmdline").content_string)
    missing = [param for param in params if not cmdline_has(running, param)]
    assert not missing, f"running kernel lacks {missing} (reboot pending?)"
