"""Provision a rig end to end from its profile.

    pyinfra inventory/rig2x.py deploys/full.py --dry --diff   # see every change
    pyinfra inventory/rig2x.py deploys/full.py                # apply

Switches (``--data key=value``): allow_reboot, skip_preflight, bench (see rigforge/context.py).
"""

from rigforge.context import run_settings
from roles import base

# Validate the run's switches before any operation is planned.
run_settings()

# --- preflight ---
# --- end preflight ---

# --- host layer ---
base.apply_base()
# --- end host layer ---

# --- container layer ---
# --- end container layer ---

# --- serving layer ---
# --- end serving layer ---

# --- bench ---
# --- end bench ---
