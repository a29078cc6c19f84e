"""Provision a rig end to end from its profile.

    pyinfra inventory/rig2x.py deploys/full.py --dry --diff   # see every change
    pyinfra inventory/rig2x.py deploys/full.py                # apply

Switches (``--data key=value``): allow_reboot, skip_preflight, bench (see rigforge/context.py).
"""

from rigforge.context import run_settings
from roles import base

# Validate the run's switches before any operation is planned.
run_settings()

base.apply_base()
