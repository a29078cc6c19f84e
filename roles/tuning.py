"""Tuning role: CPU governor, sysctls, GPU persistence mode and power limit, and ACS on switch rigs.

Everything here must hold after every boot, so each setting lives where the boot applies it:

- **governor**: a systemd-tmpfiles line (``w /sys/.../scaling_governor``), written at every boot by
  systemd-tmpfiles-setup; applied now with ``systemd-tmpfiles --create`` when the file changed.
- **sysctls**: /etc/sysctl.d/90-rigforge.conf, read at every boot by systemd-sysctl; ``sysctl --system``
  runs only when the file changed, and not in a container host, whose /proc/sys is the machine's and
  read-only (systemd-sysctl skips itself there for the same reason).
- **GPU settings**: a oneshot unit running ``nvidia-smi -pm`` and ``-pl`` at every boot after
  nvidia-persistenced; restarted on change when the profile's driver is already loaded (otherwise
  the coming reboot runs it).
- **ACS**: on switch rigs with ``tuning.disable_acs``, a oneshot unit runs a script at every boot that
  clears ACS request/completion redirect with setpci (rig-facts §1.7); never in a container host.

``systemctl daemon-reload`` runs only when a unit file changed. Settings the profile drops are removed.
"""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta

from rigforge.context import current_profile
from rigforge.facts.pci import ACS_CONTROL_REGISTER_OFFSET
from rigforge.operations.files import managed_file
from rigforge.operations.followup import follow_up
from rigforge.operations.managed import absent
from rigforge.operations.missing_tool import service_unit
from rigforge.profile import Profile
from rigforge.render import render
from roles.driver import driver_ready

GOVERNOR_FILE = "/etc/tmpfiles.d/rigforge-cpu-governor.conf"
SYSCTL_FILE = "/etc/sysctl.d/90-rigforge.conf"
UNIT_DIR = "/etc/systemd/system"
GPU_SETTINGS_UNIT = "rigforge-gpu-settings.service"
ACS_UNIT = "rigforge-disable-acs.service"
ACS_SCRIPT = "/usr/local/sbin/rigforge-disable-acs"
NVIDIA_SMI = "/usr/bin/nvidia-smi"
READ_ONLY_PROC_SYS = "/proc/sys belongs to the machine's kernel and is read-only here"


def render_tuning_files(profile: Profile) -> dict[str, str]:
    """Every tuning file the profile asks for: path -> content."""
    tuning = profile.tuning
    rendered: dict[str, str] = {}
    if tuning.cpu_governor:
        rendered[GOVERNOR_FILE] = render("tuning/cpu-governor.conf.j2", profile, governor=tuning.cpu_governor)
    if tuning.sysctl:
        rendered[SYSCTL_FILE] = render("tuning/sysctl.conf.j2", profile, settings=tuning.sysctl)
    if profile.gpus is not None:
        rendered[f"{UNIT_DIR}/{GPU_SETTINGS_UNIT}"] = render(
            "tuning/rigforge-gpu-settings.service.j2", profile, nvidia_smi=NVIDIA_SMI,
            persistence_mode=int(profile.gpus.persistence_mode), power_limit_w=profile.gpus.power_limit_w)
    if tuning.disable_acs:
        rendered[ACS_SCRIPT] = render("tuning/disable-acs.sh.j2", profile, control_offset=ACS_CONTROL_REGISTER_OFFSET)
        rendered[f"{UNIT_DIR}/{ACS_UNIT}"] = render("tuning/rigforge-disable-acs.service.j2", profile,
                                                    script=ACS_SCRIPT)
    return rendered


def _file_or_absent(rendered: dict[str, str], path: str, what: str, mode: str = "644",
                    unit: str | None = None) -> OperationMeta:
    if path in rendered:
        return managed_file(name=f"Write {what} ({path})", dest=path, content=rendered[path], mode=mode)
    return absent(name=f"Remove {path} (not in the profile)", path=path, unit=unit)


@deploy("CPU and GPU tuning")
def apply_tuning() -> None:
    """Write the tuning files and units; apply each now only when it changed and can apply here."""
    profile = current_profile()
    rendered = render_tuning_files(profile)

    governor = _file_or_absent(rendered, GOVERNOR_FILE, "the CPU governor")
    if GOVERNOR_FILE in rendered:
        follow_up(name="Apply the CPU governor now", commands=[f"systemd-tmpfiles --create {GOVERNOR_FILE}"],
                  triggers=[governor], what="set the CPU governor")
    sysctls = _file_or_absent(rendered, SYSCTL_FILE, "the sysctls")
    follow_up(name="Apply the sysctls now", commands=["sysctl --system"], triggers=[sysctls], what="sysctl --system",
              not_in_container=READ_ONLY_PROC_SYS)

    gpu_unit = _file_or_absent(rendered, f"{UNIT_DIR}/{GPU_SETTINGS_UNIT}", "the GPU settings unit",
                               unit=GPU_SETTINGS_UNIT)
    acs_script = _file_or_absent(rendered, ACS_SCRIPT, "the ACS script", mode="755")
    acs_unit = _file_or_absent(rendered, f"{UNIT_DIR}/{ACS_UNIT}", "the ACS unit", unit=ACS_UNIT)
    follow_up(name="Reload systemd (unit files changed)", commands=["systemctl daemon-reload"],
              triggers=[gpu_unit, acs_unit], what="systemctl daemon-reload")

    if profile.gpus is not None:
        service_unit(name=f"Enable {GPU_SETTINGS_UNIT}", service=GPU_SETTINGS_UNIT, enabled=True, running=None)
        if driver_ready(profile):
            follow_up(name="Apply the GPU settings now", commands=[f"systemctl restart {GPU_SETTINGS_UNIT}"],
                      triggers=[gpu_unit], what="apply persistence mode and power limit")
    if profile.tuning.disable_acs:
        service_unit(name=f"Enable {ACS_UNIT}", service=ACS_UNIT, enabled=True, running=None)
        follow_up(name="Clear ACS redirect now", commands=[f"systemctl restart {ACS_UNIT}"],
                  triggers=[acs_script, acs_unit], what="clear ACS redirect",
                  not_in_container="a container host owns no PCI devices")
