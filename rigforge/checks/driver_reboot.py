"""A reboot pending after a driver update: the user-space driver and the loaded kernel module differ.

apt (or unattended-upgrades) replaces the user-space driver (libnvidia-ml, libcuda, nvidia-smi) at once, while
the running kernel keeps the module it booted with until the next boot. NVML then refuses to start
("Failed to initialize NVML: Driver/library version mismatch"), and with it nvidia-smi, the container toolkit
and every engine: the rig is down until it reboots. Read from two facts: nvidia-smi's own version (the user
space) and the loaded module (/proc/driver/nvidia/version, else nvidia-smi's DRIVER line).

    mismatch = driver_mismatch(host.get_fact(NvidiaLoadedDriver), host.get_fact(NvidiaSmiVersions))
    if mismatch: print(mismatch.found, REBOOT_FIX)
"""

from __future__ import annotations

from dataclasses import dataclass

from rigforge.checks.model import Check, HostFacts, deploy_fixes, ok
from rigforge.facts import LoadedDriver
from rigforge.facts.packages import SmiVersions
from rigforge.profile import Profile

NAME = "driver-reboot"
EXPECTED = "user-space driver and loaded kernel module of one version"
#: The doctor's row for it (rigforge.doctor shows it beside the logs' known failures).
DOCTOR_ID = "driver-reboot-pending"
CAUSE = ("a reboot is pending: the NVIDIA user-space driver was updated, the running kernel still has the module "
         "it booted with, and NVML (nvidia-smi, the container toolkit, every engine) refuses to start")


@dataclass(frozen=True)
class DriverMismatch:
    """The user-space driver and the loaded kernel module disagree.

    + user_space: nvidia-smi's own version (the installed user-space driver), None when it does not say
    + loaded: the loaded module's version, None when NVML refuses to read it
    + evidence: where it shows (nvidia-smi's message, or the two versions' sources)
    """

    user_space: str | None
    loaded: str | None
    evidence: str

    @property
    def found(self) -> str:
        """One line for a table: both versions and the evidence."""
        loaded = f"loaded kernel module {self.loaded}" if self.loaded else "the loaded kernel module refused"
        return f"user-space driver {self.user_space or '?'}, {loaded} ({self.evidence})"


def driver_mismatch(loaded: LoadedDriver | None, smi: SmiVersions | None) -> DriverMismatch | None:
    """The mismatch the facts show, or None (no nvidia-smi, no module, or one version throughout).

    + loaded: the NvidiaLoadedDriver fact (/proc/driver/nvidia/version)
    + smi: the NvidiaSmiVersions fact (``nvidia-smi --version``)

    >>> refused = SmiVersions("595.45.04", None, "Failed to initialize NVML: Driver/library version mismatch")
    >>> driver_mismatch(None, refused).evidence
    'nvidia-smi: Failed to initialize NVML: Driver/library version mismatch'
    >>> driver_mismatch(LoadedDriver("580.95.05", True), SmiVersions("595.45.04", None, None)).found
    'user-space driver 595.45.04, loaded kernel module 580.95.05 (nvidia-smi --version, /proc/driver/nvidia/version)'
    """
    if smi is None:
        return None
    module = loaded.version if loaded is not None else smi.driver_version
    if smi.error and "version mismatch" in smi.error.lower():
        return DriverMismatch(smi.smi_version, module, f"nvidia-smi: {smi.error}")
    if smi.smi_version and module and smi.smi_version != module:
        source = "/proc/driver/nvidia/version" if loaded is not None else "its DRIVER line"
        return DriverMismatch(smi.smi_version, module, f"nvidia-smi --version, {source}")
    return None


REBOOT_FIX = ("reboot the rig: where the profile installs the driver, deploys/host.py (also deploys/full.py and "
              "deploys/driver_update.py) reboots into it with --data allow_reboot=true (the default; "
              "allow_reboot=false stops and says so); a driver the profile does not install is the owner's, and "
              "rigforge never reboots for it: reboot the rig yourself")


def check_driver_reboot(profile: Profile, facts: HostFacts) -> Check | None:
    """A warn row while a reboot is pending (the deploy reboots), ok when nvidia-smi and the module agree;
    nothing where there is no nvidia-smi."""
    smi = facts.smi_versions
    mismatch = driver_mismatch(facts.loaded_driver, smi)
    if mismatch is None:
        if smi is None or not smi.smi_version:
            return None
        return ok(NAME, EXPECTED, f"{smi.smi_version} in user space and loaded")
    del profile  # the module and the user space disagree whoever installed the driver
    return deploy_fixes(NAME, EXPECTED, mismatch.found, f"{CAUSE}; {REBOOT_FIX}")


def doctor_record(mismatch: DriverMismatch) -> dict[str, object]:
    """The doctor's row for a pending reboot, in the shape of a known-failure hit (roles/doctor.py)."""
    return {"id": DOCTOR_ID, "where": "driver", "severity": "fail", "count": 1, "line": mismatch.found,
            "cause": CAUSE, "fix": REBOOT_FIX, "profile_fields": []}
