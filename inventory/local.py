"""Inventory for the rig rigforge runs on: one rig, no second machine (pyinfra's ``@local``, no SSH).

Run rigforge on the rig itself, as root (or as a sudoer with ``_sudo=True`` below), naming the rig's profile
in ``RIGFORGE_PROFILE`` (a file stem under inventory/profiles) or below:

    RIGFORGE_PROFILE=2x-pix pyinfra -y inventory/local.py deploys/preflight.py      # read-only table
    RIGFORGE_PROFILE=2x-pix pyinfra inventory/local.py deploys/full.py --dry --diff  # every change, none applied
    RIGFORGE_PROFILE=2x-pix python -m rigforge.doctor inventory/local.py             # known failures in the logs
    pytest --hosts=local:// --profile 2x-pix tests/verify                             # verify the rig

Everything else is as for a rig reached over SSH (README.md, "On the rig itself"). A deploy that reboots the
rig ends the pyinfra run with it: run the deploy again after the boot, it goes on where it stopped.
"""

from rigforge.inventory import local_host

local = [
    local_host(
        # profile="2x-pix",            # the rig's profile here instead of RIGFORGE_PROFILE
        # _sudo=True,                  # uncomment when running as a sudoer rather than root
        # allow_reboot=False,          # uncomment to forbid reboots (the deploy then says why one is needed)
        # profile_overrides={"engine": {"port": 8001}},  # settings over the profile for this rig
    ),
]
