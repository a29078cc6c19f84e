"""Which kernel boots next and whether it has the NVIDIA module: parsers on files the real GRUB tools wrote
(tests/fixtures/host/grub), the check's verdicts and messages, and the fix the driver role plans."""

from __future__ import annotations

from pathlib import Path

import pytest

from rigforge.checks import run_checks
from rigforge.checks.platform import check_kernel_module
from rigforge.facts.grub import next_boot_kernel, parse_menu
from rigforge.facts.kernel import KernelModules, parse_kernel_modules
from rigforge.operations.kernel_module import kernel_headers, missing_module_lines
from rigforge.profile.loader import load_profile

GRUB = Path(__file__).resolve().parents[1] / "fixtures" / "host" / "grub"
OLD, NEW = "0.0.0-rigforge-sandbox", "6.1.0-99-amd64"


def grub(name: str) -> str:
    return (GRUB / name).read_text()


def test_the_menu_has_the_default_entry_and_the_advanced_submenu() -> None:
    menu = parse_menu(grub("debian12-two-kernels-default0.cfg"))
    assert [entry.title for entry in menu] == ["Debian GNU/Linux", "Advanced options for Debian GNU/Linux"]
    assert menu[0].kernel == NEW and menu[0].entry_id.startswith("gnulinux-simple-")
    assert [entry.kernel for entry in menu[1].children or []] == [NEW, NEW, OLD, OLD]


def test_grub_default_0_boots_the_newest_kernel() -> None:
    chosen = next_boot_kernel(grub("debian12-two-kernels-default0.cfg"), "")
    assert (chosen.kernel, chosen.how) == (NEW, "GRUB default '0'")


def test_saved_entry_and_next_entry_from_grubenv() -> None:
    cfg = grub("debian12-two-kernels-saved.cfg")
    assert next_boot_kernel(cfg, grub("grubenv-saved-older-kernel")).kernel == OLD
    once = next_boot_kernel(cfg, grub("grubenv-next-entry-newer-kernel"))
    assert (once.kernel, once.how) == (NEW, "grubenv next_entry '1>0'")
    assert next_boot_kernel(cfg, "").kernel == NEW  # saved with nothing saved: entry 0


def test_an_unknown_default_names_no_kernel() -> None:
    assert next_boot_kernel(grub("debian12-two-kernels-default0.cfg"), "next_entry=7\n").kernel is None


def fact_output(modules: dict[str, str], cfg: str = "", container: str = "none", boot: tuple[str, ...] = ()) -> str:
    lines = ["## running", "6.1.0-26-amd64", "## container", container, "## boot", *boot, "## grub.cfg", cfg,
             "## grubenv", "## modules", *(f"{kernel} {version}".strip() for kernel, version in modules.items())]
    return "\n".join(lines)


def test_the_fact_on_a_rig_after_a_kernel_upgrade_without_headers() -> None:
    cfg = grub("debian12-two-kernels-default0.cfg").replace(OLD, "6.1.0-26-amd64")
    kernels = parse_kernel_modules(fact_output({"6.1.0-26-amd64": "595.45.04", NEW: ""}, cfg,
                                               boot=("6.1.0-26-amd64", NEW)))
    assert (kernels.running, kernels.container, kernels.next_boot) == ("6.1.0-26-amd64", False, NEW)
    assert kernels.kernels_needing_module() == ["6.1.0-26-amd64", NEW]
    assert kernels.missing("595.45.04") == [NEW]
    assert kernel_headers(kernels) == ["linux-headers-6.1.0-26-amd64", f"linux-headers-{NEW}"]
    [line] = missing_module_lines(kernels, "595.45.04")
    assert line == (f"the NVIDIA 595.45.04 module is missing for {NEW} (next boot, GRUB default '0'): no nvidia "
                    f"module; fix: apt-get install linux-headers-{NEW} && dkms autoinstall -k {NEW}")


def test_without_a_menu_the_newest_kernel_in_boot_boots_next() -> None:
    kernels = parse_kernel_modules(fact_output({"6.1.0-26-amd64": "595.45.04"}, boot=("6.1.0-26-amd64",)))
    assert kernels.next_boot == "6.1.0-26-amd64" and kernels.missing("595.45.04") == []
    assert "newest kernel in /boot" in kernels.next_boot_how


def test_a_container_host_judges_only_its_own_next_boot_kernel() -> None:
    kernels = parse_kernel_modules(fact_output({"6.1.0-26-amd64": "", OLD: "595.45.04"}, container="docker",
                                               boot=(OLD,)))
    assert kernels.container and kernels.kernels_needing_module() == [OLD]
    assert kernels.missing("595.45.04") == []
    bare = KernelModules("6.18.0", True, None, "", {"6.18.0": None})
    assert bare.kernels_needing_module() == [] and kernel_headers(bare) == []


@pytest.fixture(scope="module")
def profile_with_driver():  # noqa: ANN201 - a Profile
    profile = load_profile("2x-pix")
    assert profile.driver is not None
    return profile


def test_the_check_fails_after_a_deploy_and_names_the_fix(profile_with_driver) -> None:  # noqa: ANN001
    from rigforge.checks.capture import read_capture

    facts = read_capture(Path("/nonexistent"))
    version = profile_with_driver.driver.version
    cfg = grub("debian12-two-kernels-default0.cfg").replace(OLD, "6.1.0-26-amd64")
    kernels = parse_kernel_modules(fact_output({"6.1.0-26-amd64": version, NEW: ""}, cfg))
    check = check_kernel_module(profile_with_driver, _with(facts, kernels))
    assert check is not None and check.verdict == "warn" and not check.holds_after_deploy
    assert check.fix.startswith(f"apt-get install linux-headers-{NEW} && dkms autoinstall -k {NEW}")
    assert f"{NEW} (next boot, GRUB default '0'): no nvidia module" in check.found
    fixed = parse_kernel_modules(fact_output({"6.1.0-26-amd64": version, NEW: version}, cfg))
    assert check_kernel_module(profile_with_driver, _with(facts, fixed)).verdict == "ok"
    names = [check.name for check in run_checks(profile_with_driver, _with(facts, fixed))]
    assert "kernel-module" in names


def test_before_any_driver_the_check_says_the_deploy_installs_it(profile_with_driver) -> None:  # noqa: ANN001
    from rigforge.checks.capture import read_capture

    kernels = parse_kernel_modules(fact_output({"6.1.0-26-amd64": ""}, boot=("6.1.0-26-amd64",)))
    check = check_kernel_module(profile_with_driver, _with(read_capture(Path("/nonexistent")), kernels))
    assert check is not None and check.verdict == "warn" and "no driver yet" in check.fix


def _with(facts, kernels: KernelModules):  # noqa: ANN001, ANN202 - HostFacts
    from dataclasses import replace

    return replace(facts, kernel_modules=kernels)
