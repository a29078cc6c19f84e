"""Provision the host layer only: base packages, driver + CUDA, modprobe, kernel command line, tuning, NCCL.

What a rig owner runs after editing kernel parameters, modprobe options, sysctls or NCCL variables in the
profile; it reboots only when a boot-affecting setting changed (and says why):

    pyinfra inventory/rig2x.py deploys/host.py --dry --diff   # every file it would write, nothing applied
    pyinfra inventory/rig2x.py deploys/host.py                # apply (reboots once if needed)
    pyinfra inventory/rig2x.py deploys/host.py --data allow_reboot=false   # never reboot: report instead
"""

from rigforge.context import run_settings
from rigforge.operations.lock import release_deploy_lock, take_deploy_lock
from roles import host, takeover

# Validate the run's switches before any operation is planned.
run_settings(takes=())

take_deploy_lock()
takeover.apply_takeover(layers=("host",))
host.apply_host()
release_deploy_lock()
