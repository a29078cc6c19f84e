"""The host layer: base, then every host role in the order their effects need, then the reboot step.

Order and why:

0. Secure Boot - on with DKMS's key not enrolled, the host stops before any change
   (``rigforge/operations/secure_boot.py``), ``skip_preflight=true`` or not; so does a driver the owner
   installed that must be replaced, unless ``--data replace_driver=true`` allows it
   (``rigforge/operations/driver_takeover.py``);
1. base - packages the later roles call (curl, gnupg, pciutils…) and /etc/rigforge;
2. modprobe - nouveau is blacklisted and the uvm options are in place before the driver arrives;
3. driver - NVIDIA's repository, the pinned and held driver, nvidia-persistenced;
4. cuda - the toolkit from the same repository (lists refreshed once per run);
5. boot - the GRUB drop-in with the kernel parameters;
6. tuning - governor, sysctls, GPU settings and ACS units;
7. nccl - nccl.conf, the engine environment, the graph XML;
8. reboot - only when a boot-affecting input changed (modprobe.d, driver package, GRUB drop-in), the
   running kernel lacks a parameter, or the loaded driver is not the installed one
   (``rigforge/operations/reboot.py``). ``--data allow_reboot=false`` turns a needed reboot into a
   failure that says why.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta

from rigforge.context import current_profile, run_settings
from rigforge.operations.driver_takeover import refuse_foreign_driver
from rigforge.operations.nvidia_apt import RepoPlatform, driver_packages
from rigforge.operations.reboot import reboot_if_needed, record_pending_reboot
from rigforge.operations.secure_boot import refuse_untrusted_driver
from rigforge.profile import Profile
from roles import base, boot, cuda, driver, modprobe, nccl, tuning


def render_host_files(profile: Profile, platform: RepoPlatform) -> dict[str, str]:
    """Every file the host roles write for ``profile`` on a host of ``platform``: path -> content."""
    rendered: dict[str, str] = {}
    for part in (modprobe.render_modprobe_files(profile), driver.render_driver_files(profile, platform),
                 cuda.render_cuda_files(profile), boot.render_boot_files(profile),
                 tuning.render_tuning_files(profile), nccl.render_nccl_files(profile)):
        overlap = set(rendered) & set(part)
        if overlap:
            raise ValueError(f"two host roles write {sorted(overlap)}")
        rendered.update(part)
    return dict(sorted(rendered.items()))


def remember_reboot_triggers(triggers: Sequence[tuple[OperationMeta, str]]) -> None:
    """Record, right after the operations ran, which boot-affecting inputs changed (until the next boot)."""
    grouped: dict[str, list[OperationMeta]] = {}
    for operation, what in triggers:
        grouped.setdefault(what, []).append(operation)
    for what, operations in host.loop(list(grouped.items())):
        record_pending_reboot(name=f"Note a pending reboot if {what} changed", triggers=operations, what=what)


@deploy("Host layer")
def apply_host() -> None:
    """Make the host what the profile says, rebooting once at the end if (and only if) it must."""
    profile = current_profile()
    settings = run_settings()
    # Before any change, even past skip_preflight: a module Secure Boot rejects leaves the rig without GPUs.
    refuse_untrusted_driver(name="Refuse a driver Secure Boot would reject", driver=profile.driver is not None)
    refuse_foreign_driver(name="Refuse to install over the owner's driver", profile=profile,
                          allowed=settings.replace_driver)
    base.apply_base()
    triggers = modprobe.apply_modprobe()
    remember_reboot_triggers(triggers)
    driver_changes = driver.apply_driver()
    remember_reboot_triggers(driver_changes.boot_triggers)
    triggers += driver_changes.boot_triggers
    cuda.apply_cuda(refreshed_by=driver_changes.refreshed_by)
    boot_triggers = boot.apply_boot()
    remember_reboot_triggers(boot_triggers)
    triggers += boot_triggers
    tuning.apply_tuning()
    nccl.apply_nccl()
    reboot_if_needed(
        name="Reboot if needed",
        triggers=triggers,
        kernel_params=profile.boot.kernel_params,
        driver_packages=driver_packages(profile.driver.flavor) if profile.driver else (),
        allow_reboot=settings.allow_reboot,
    )
