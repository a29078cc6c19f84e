"""Inventory for a 2x-pix rig: 2 GPUs behind a PCIe switch (PIX), SGLang, Qwen3.5-122B NVFP4.

Edit the host below: its address, the SSH user and key. Then look before you leap:

    pyinfra inventory/rig2x.py deploys/full.py --dry --diff    # every change, nothing applied
    pyinfra inventory/rig2x.py deploys/full.py                 # apply

The rig's host key must already be in ~/.ssh/known_hosts (ssh to it once): rigforge never accepts an
unknown host key. Add more rigs of the same kind as more rig_host(...) entries.
"""

from rigforge.inventory import rig_host

rig2x = [
    rig_host(
        "rig2x-a",                      # a name for this rig in pyinfra's output
        profile="2x-pix",               # inventory/profiles/2x-pix.yaml
        ssh_hostname="192.0.2.10",     # EDIT: the rig's address or DNS name
        ssh_user="root",               # EDIT: a sudoer works too; then add _sudo=True below
        ssh_key="~/.ssh/id_ed25519",   # EDIT: the key that logs in to the rig
        # allow_reboot=False,          # uncomment to forbid reboots (the deploy then says why one is needed)
        # profile_overrides={"engine": {"port": 8001}},  # per-rig settings over the profile
    ),
]
