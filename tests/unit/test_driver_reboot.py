"""A reboot pending after a driver update: preflight's driver-reboot row, the doctor's driver row, the reboot reason.

The mismatched state is the stand-in nvidia-smi's real output (tests/standins/nvidia_cuda_repo.py, the script
the sandbox hosts get, run here with its "loaded module" file in a temporary folder): it answers like the real tool,
"Failed to initialize NVML: Driver/library version mismatch", when the loaded module is another version. The
agreeing state is the lent H200 machine's capture.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from rigforge.checks.driver_reboot import DOCTOR_ID, check_driver_reboot, doctor_record, driver_mismatch
from rigforge.doctor import render_table, verdict_status
from rigforge.facts import LoadedDriver, NvidiaLoadedDriver
from rigforge.facts.packages import (
    BootEnvironment,
    NvidiaSmiVersions,
    SmiVersions,
    parse_smi_version,
)
from rigforge.operations import reboot
from tests.standins.nvidia_cuda_repo import NVIDIA_SMI, module_version_line
from tests.support_checks import H200, capture_facts, empty_facts, profile

MISMATCH = "Failed to initialize NVML: Driver/library version mismatch"


def standin_smi_version(tmp_path: Path, user_space: str, loaded: str | None) -> SmiVersions | None:
    """``nvidia-smi --version`` of the stand-in with user space ``user_space`` and module ``loaded`` loaded."""
    module = tmp_path / "version"
    if loaded:
        module.write_text(module_version_line(loaded, "x86_64") + "\n")
    script = tmp_path / "nvidia-smi"
    script.write_text(NVIDIA_SMI.format(note="test", loaded=module, module=tmp_path / "m", version=user_space,
                                        apps=tmp_path / "apps"))
    run = subprocess.run(["sh", str(script), "--version"], capture_output=True, text=True, check=False)
    return parse_smi_version(run.stdout)


def test_the_stand_in_after_an_update_without_reboot_is_a_pending_reboot(tmp_path: Path) -> None:
    smi = standin_smi_version(tmp_path, "595.45.04", loaded="580.95.05")
    assert smi is not None and smi.error == "Failed to initialize NVML: Driver/library version mismatch"
    facts = replace(empty_facts(), smi_versions=smi)
    for name in ("sandbox", "2x-pix"):
        row = check_driver_reboot(profile(name), facts)
        assert row is not None and (row.name, row.verdict, row.deploy_fixes) == ("driver-reboot", "warn", True)
        assert row.found.startswith("user-space driver 595.45.04, the loaded kernel module refused (nvidia-smi: ")
        assert "a reboot is pending" in row.fix and "--data allow_reboot=true" in row.fix


def test_one_version_throughout_is_ok_and_no_nvidia_smi_is_no_row(tmp_path: Path) -> None:
    smi = standin_smi_version(tmp_path, "595.45.04", loaded="595.45.04")
    assert driver_mismatch(None, smi) is None
    row = check_driver_reboot(profile("sandbox"), replace(empty_facts(), smi_versions=smi))
    assert row is not None and (row.verdict, row.found) == ("ok", "595.45.04 in user space and loaded")
    h200 = check_driver_reboot(profile("2x-pix"), capture_facts(H200))  # the real capture: 580.159.04 both
    assert h200 is not None and h200.verdict == "ok"
    assert check_driver_reboot(profile("sandbox"), empty_facts()) is None
    # No module at all is not a pending reboot (nvidia-smi "couldn't communicate"): the driver row says it.
    assert driver_mismatch(None, standin_smi_version(tmp_path, "595.45.04", loaded=None)) is None


def test_a_loaded_module_of_another_version_names_both() -> None:
    mismatch = driver_mismatch(LoadedDriver("580.159.04", True), SmiVersions("595.45.04", None, None))
    assert mismatch is not None
    assert mismatch.found == ("user-space driver 595.45.04, loaded kernel module 580.159.04 (nvidia-smi --version, "
                              "/proc/driver/nvidia/version)")


def test_the_doctor_shows_it_as_a_driver_row_that_fails_the_rig(tmp_path: Path) -> None:
    mismatch = driver_mismatch(None, standin_smi_version(tmp_path, "595.45.04", loaded="580.95.05"))
    assert mismatch is not None
    records = {"rig-a": {"host": "rig-a", "since": None, "hits": [doctor_record(mismatch)]}}
    table = render_table(["rig-a"], records).splitlines()
    assert table[2].startswith(f"| rig-a | driver | {DOCTOR_ID} | fail | 1 | `user-space driver 595.45.04")
    assert "reboot the rig" in table[2] and "allow_reboot=true" in table[2]
    assert verdict_status(["rig-a"], records) == 1


@pytest.mark.parametrize("installed", [None, "595.45.04"])
def test_the_reboot_reasons_reboot_only_for_the_profiles_driver(monkeypatch: pytest.MonkeyPatch,
                                                                installed: str | None) -> None:
    """The host layer's reboot reasons (a fake host answering the facts): the profile's own driver, installed and not
    loaded, is one reason; an owner's driver in the same state (the profile installs none) is no reason at all:
    rigforge names that pending reboot (preflight, the doctor) but never reboots the owner's machine for it."""
    smi = SmiVersions("595.45.04", None, "Failed to initialize NVML: Driver/library version mismatch")
    answers = {NvidiaSmiVersions: smi, NvidiaLoadedDriver: None, BootEnvironment: SimpleNamespace(container=True)}
    monkeypatch.setattr(reboot, "state", SimpleNamespace(is_executing=True))
    monkeypatch.setattr(reboot, "installed_driver_version", lambda packages, names: installed)
    def get_fact(fact: type, **_: object) -> object:
        return [] if fact.__name__ == "FileContents" else answers.get(fact, {})

    target = SimpleNamespace(get_fact=get_fact)
    reasons = reboot.current_reasons(target, (), (), ("nvidia-open",) if installed else ())
    if installed:
        assert len(reasons) == 1, reasons
        assert reasons[0].startswith("NVIDIA driver 595.45.04 is installed but it is not loaded (nvidia-smi: ")
    else:
        assert reasons == []


@pytest.mark.parametrize(("allow_reboot", "then"), [
    (True, "this update reboots into 595.45.04"),
    (False, "reboots are off (allow_reboot=false): run it with --data allow_reboot=true, or reboot the rig first"),
])
def test_the_driver_update_says_it_before_anything_runs(planning, monkeypatch: pytest.MonkeyPatch, allow_reboot: bool,
                                                        then: str) -> None:
    """roles/driver_update.py planned through pyinfra's API on the stand-in's answer (tests/unit/conftest.py)."""
    from roles import driver_update

    _, host, facts = planning
    facts[NvidiaSmiVersions] = SmiVersions("595.45.04", None, MISMATCH)
    facts[NvidiaLoadedDriver] = None
    said: list[str] = []
    monkeypatch.setattr(host, "log", lambda message, *args, **kwargs: said.append(message))
    plan = driver_update.UpdatePlan(installed="595.45.04", loaded=None, target="595.45.04", rollback=False)
    driver_update.say_pending_reboot(plan, allow_reboot)
    assert said == ["driver update: a reboot is pending: the NVIDIA user-space driver 595.45.04, the loaded kernel "
                    "module refused (nvidia-smi: Failed to initialize NVML: Driver/library version mismatch); " + then]
    said.clear()
    facts[NvidiaSmiVersions] = SmiVersions("595.45.04", "595.45.04", None)
    driver_update.say_pending_reboot(plan, allow_reboot)
    assert said == []
