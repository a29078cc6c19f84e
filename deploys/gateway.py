"""The fleet's one endpoint: HAProxy on the host whose profile sets ``gateway.install``, every rig behind it.

    pyinfra inventory/rig2x.py deploys/gateway.py --dry --diff   # the configuration's diff, nothing applied
    pyinfra inventory/rig2x.py deploys/gateway.py                # apply

Each model of the inventory (``engine.served_model_name``) is one route to every rig serving it, with active health
checks that notice a hung engine, retries for requests no rig has answered yet, and each rig out of rotation
once past its health timeout (docs/fleet.md). Clients send ``Authorization: Bearer KEY`` with a key of
``gateway.users`` (shown on the gateway host with ``sudo cat /etc/rigforge/secrets/gateway/users/NAME``). The
other hosts of the inventory are only read (their profiles), never changed by this deploy.
"""

from rigforge.context import run_settings
from rigforge.operations.lock import release_deploy_lock, take_deploy_lock
from roles import gateway

# Validate the run's switches before any operation is planned.
run_settings(takes=())

take_deploy_lock()
gateway.apply_gateway()
release_deploy_lock()
