"""Boot role: the profile's kernel parameters in a GRUB drop-in, and update-grub only when it changed.

``/etc/default/grub.d/99-rigforge.cfg`` appends ``boot.kernel_params`` to ``GRUB_CMDLINE_LINUX`` (the
distribution's own settings stay; the name sorts it last). ``update-grub`` runs only when the drop-in
changed (see ``rigforge/operations/boot.py`` for what happens in a container host). The drop-in is a
reboot trigger; the reboot step also compares the running /proc/cmdline with the parameters, so a
host where the drop-in is right but the kernel never rebooted into it is still caught.
"""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import files

from rigforge.context import current_profile
from rigforge.operations.boot import update_grub
from rigforge.operations.files import managed_file
from rigforge.operations.managed import absent
from rigforge.profile import Profile
from rigforge.render import render

GRUB_DROPIN_DIR = "/etc/default/grub.d"
GRUB_DROPIN = f"{GRUB_DROPIN_DIR}/99-rigforge.cfg"

BootTrigger = tuple[OperationMeta, str]


def render_boot_files(profile: Profile) -> dict[str, str]:
    """The GRUB drop-in (none when the profile has no kernel parameters): path -> content."""
    if not profile.boot.kernel_params:
        return {}
    return {GRUB_DROPIN: render("grub/rigforge.cfg.j2", profile, kernel_params=profile.boot.kernel_params)}


@deploy("Kernel command line")
def apply_boot() -> list[BootTrigger]:
    """Write (or remove) the GRUB drop-in and update GRUB when it changed; return the reboot trigger."""
    profile = current_profile()
    rendered = render_boot_files(profile)
    if rendered:
        files.directory(name=f"Create {GRUB_DROPIN_DIR}", path=GRUB_DROPIN_DIR, mode="755", user="root", group="root")
        dropin = managed_file(name=f"Write the kernel parameters to {GRUB_DROPIN}", dest=GRUB_DROPIN,
                              content=rendered[GRUB_DROPIN])
    else:
        dropin = absent(name=f"Remove {GRUB_DROPIN} (no kernel parameters in the profile)", path=GRUB_DROPIN)
    update_grub(name="Update GRUB (kernel parameters changed)", triggers=[dropin],
                kernel_params=profile.boot.kernel_params)
    return [(dropin, f"the kernel parameters in {GRUB_DROPIN}")]
