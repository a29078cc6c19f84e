"""The built-in sandbox rig: local Debian 12 systemd hosts started by ``python -m rigforge.sandbox up``.

    python -m rigforge.sandbox up          # start the sandbox host(s)
    pyinfra inventory/sandbox.py deploys/full.py

RIGFORGE_SANDBOX_STATE names another state directory (default: .sandbox).
"""

from rigforge.inventory import sandbox_hosts
from rigforge.sandbox.state import default_state_dir

sandbox = sandbox_hosts(default_state_dir(), profile="sandbox")
