"""Modprobe role: kernel module options and blacklist in /etc/modprobe.d, then the initramfs.

Every file comes from the profile's ``modprobe`` section: one ``rigforge-<module>.conf`` per module with
options (``nvidia_uvm uvm_disable_hmm=1`` on every GPU rig), ``rigforge-blacklist.conf`` (nouveau), and
the ForceP2P ``NVreg_RegistryDwords`` override only where the profile asks for it, which the schema
allows on direct-attach NODE topologies only (never PIX/PXB, rig-facts §1.5). The initramfs carries
modprobe.d, so it is rebuilt only when one of these files changed, and such a change is boot-affecting:
the host layer reboots so the modules load with the new options. A rigforge file the profile no
longer asks for is removed (the same counts as a change).
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta
from pyinfra.facts.files import FindFiles

from rigforge.context import current_profile
from rigforge.operations.boot import update_initramfs
from rigforge.operations.files import managed_file
from rigforge.operations.managed import absent
from rigforge.profile import Profile
from rigforge.render import render

MODPROBE_DIR = "/etc/modprobe.d"
BLACKLIST_FILE = f"{MODPROBE_DIR}/rigforge-blacklist.conf"
P2P_OVERRIDE_FILE = f"{MODPROBE_DIR}/rigforge-nvidia-p2p-override.conf"

BootTrigger = tuple[OperationMeta, str]


def options_file(module: str) -> str:
    """Where the options of ``module`` go."""
    return f"{MODPROBE_DIR}/rigforge-{module}.conf"


def render_modprobe_files(profile: Profile) -> dict[str, str]:
    """Every modprobe.d file the profile asks for: path -> content."""
    rendered = {
        options_file(module): render("modprobe/options.conf.j2", profile, module=module, params=params)
        for module, params in sorted(profile.modprobe.options.items())
    }
    if profile.modprobe.blacklist:
        rendered[BLACKLIST_FILE] = render("modprobe/blacklist.conf.j2", profile, modules=profile.modprobe.blacklist)
    if profile.modprobe.force_p2p_override:
        rendered[P2P_OVERRIDE_FILE] = render("modprobe/nvidia-p2p-override.conf.j2", profile,
                                             registry_dwords=profile.modprobe.p2p_registry_dwords)
    return rendered


@deploy("Kernel modules")
def apply_modprobe() -> list[BootTrigger]:
    """Write the modprobe.d files, remove stale rigforge ones, rebuild the initramfs on change.

    Returns the boot-affecting operations (for the reboot step).
    """
    profile = current_profile()
    wanted = render_modprobe_files(profile)
    changes = [
        managed_file(name=f"Write {path}", dest=path, content=content)
        for path, content in host.loop(sorted(wanted.items()))
    ]
    # Read before the deploy: only rigforge's own earlier files can be stale, and none is written above.
    existing = host.get_fact(FindFiles, path=MODPROBE_DIR, maxdepth=1, fname="rigforge-*.conf") or []
    for stale in host.loop(sorted(set(existing) - set(wanted))):
        changes.append(absent(name=f"Remove {stale} (no longer in the profile)", path=stale))
    update_initramfs(name="Update the initramfs (modprobe.d changed)", triggers=changes)
    return [(change, "a modprobe.d file (initramfs input)") for change in changes]
