"""Inventory for a 2x-pix rig: 2 GPUs behind a PCIe switch (PIX), SGLang, Qwen3.5-122B NVFP4.

Edit the host below: its address, the SSH user and key. Then look before you leap:

    pyinfra inventory/rig2x.py deploys/full.py --dry --diff    # every change, nothing applied
    pyinfra inventory/rig2x.py deploys/full.py                 # apply

The rig's host key must already be in ~/.ssh/known_hosts (check its fingerprint, then ssh to it once):
rigforge never accepts an unknown host key. Before logging in, each rig is checked: a missing key file, an
unknown or changed host key, or a rig that does not answer ends in one line for that rig (with the fix),
the other rigs go on, and pyinfra exits non-zero (docs/first-contact.md).

Logged in as a sudoer instead of root, set _sudo=True: every change is applied through sudo. Passwordless
sudo (NOPASSWD) needs nothing more; if sudo asks for a password, give it as _sudo_password (pyinfra 3.10's
name), read from the environment, never written here, or leave it out and pyinfra asks for it once per rig.
Add more rigs of the same kind as more rig_host(...) entries.
"""

from rigforge.inventory import rig_host

rig2x = [
    rig_host(
        "rig2x-a",                      # a name for this rig in pyinfra's output
        profile="2x-pix",               # inventory/profiles/2x-pix.yaml
        ssh_hostname="192.0.2.10",     # EDIT: the rig's address or DNS name
        ssh_user="root",               # EDIT: root, or a sudoer with _sudo=True below
        ssh_key="~/.ssh/id_ed25519",   # EDIT: the key that logs in to the rig
        # _sudo=True,                  # uncomment when ssh_user is a sudoer: changes are applied with sudo
        # _sudo_password=os.environ["RIG_SUDO_PASSWORD"],  # only if sudo asks for one (and `import os` above)
        # allow_reboot=False,          # uncomment to forbid reboots (the deploy then says why one is needed)
        # profile_overrides={"engine": {"port": 8001}},  # per-rig settings over the profile
    ),
]
