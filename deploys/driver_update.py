"""Change one rig's NVIDIA driver to the profile's ``driver.version`` (or ``cuda.version``), measured.

Bench (or a recent baseline) → drain → driver (and CUDA) → kernel-module check → one reboot → verify →
engine image and service, healthy → bench with the same workload → comparison and verdict, kept under
``results/<host>/``. The driver before the update is recorded in /etc/rigforge/driver-previous. A rig on
its target already plans nothing. See roles/driver_update.py; for a fleet, one rig at a time, use
``python -m rigforge.updates.rollout``.

    pyinfra inventory/rig2x.py deploys/driver_update.py --dry                        # what would change
    pyinfra inventory/rig2x.py deploys/driver_update.py                              # update (one reboot)
    pyinfra inventory/rig2x.py deploys/driver_update.py --data on_regression=rollback  # undo a slower driver
    pyinfra inventory/rig2x.py deploys/driver_update.py --data rollback=true         # back to the recorded one
"""

from rigforge.context import run_settings
from rigforge.operations.lock import release_deploy_lock, take_deploy_lock
from roles import base, driver_update, takeover

# Validate the run's switches before any operation is planned.
settings = run_settings(takes=())

take_deploy_lock()
takeover.apply_takeover(layers=("host", "serving"))
# The applied profile is recorded first: the rig's record must name the driver it now runs.
base.apply_base()
driver_update.apply_driver_update(settings)
release_deploy_lock()
