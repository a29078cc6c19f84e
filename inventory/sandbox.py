"""The built-in sandbox rig: local Debian 12 systemd hosts started by ``python -m rigforge.sandbox up``.

    python -m rigforge.sandbox up          # start the sandbox host(s)
    pyinfra inventory/sandbox.py deploys/full.py

RIGFORGE_SANDBOX_STATE names another state directory (default: .sandbox).
"""

import os

from rigforge.inventory import sandbox_hosts

sandbox = sandbox_hosts(os.environ.get("RIGFORGE_SANDBOX_STATE", ".sandbox"), profile="sandbox")
