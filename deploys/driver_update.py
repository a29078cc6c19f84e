"""Re-provision the NVIDIA driver after changing ``driver.version`` (or ``cuda.version``) in the profile.

Upgrades (or downgrades) the driver from NVIDIA's repository: un-holds the old release, installs the new
one through the version pin, re-holds it, then reboots once so the new kernel module loads, and checks
that the loaded driver is the installed one afterwards. Besides the base role (packages, the applied
profile's record) nothing else on the host is touched.

    pyinfra inventory/rig2x.py deploys/driver_update.py --dry     # what would change
    pyinfra inventory/rig2x.py deploys/driver_update.py           # apply (one reboot)
"""

from rigforge.context import current_profile, run_settings
from rigforge.operations.lock import release_deploy_lock, take_deploy_lock
from rigforge.operations.nvidia_apt import driver_packages
from rigforge.operations.reboot import reboot_if_needed
from roles import base, cuda, driver
from roles.host import remember_reboot_triggers

settings = run_settings()
profile = current_profile()

take_deploy_lock()
# The applied profile is recorded first: the rig's record must name the driver it now runs.
base.apply_base()
changes = driver.apply_driver()
remember_reboot_triggers(changes.boot_triggers)
cuda.apply_cuda(refreshed_by=changes.refreshed_by)
reboot_if_needed(
    name="Reboot if the driver changed",
    triggers=changes.boot_triggers,
    driver_packages=driver_packages(profile.driver.flavor) if profile.driver else (),
    allow_reboot=settings.allow_reboot,
)
release_deploy_lock()
