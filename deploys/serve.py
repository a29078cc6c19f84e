"""Serve the profile's model: base, weights, the engine (image or native server) and its systemd service.

    pyinfra inventory/sandbox.py deploys/serve.py --dry --diff   # see every change
    pyinfra inventory/sandbox.py deploys/serve.py                # apply

Ends with the server running under systemd and answering its health endpoint. On a GPU rig it expects
the host and container layers in place (driver, Docker): deploys/full.py runs everything, with the same
roles in its serving layer. Switches (``--data key=value``): verify_weights (re-hash every weights file
and fetch again the ones that changed), recipe=NAME (move the rig to that engine recipe of its profile: it stays
there until another switch; ``deploys/recipes.py`` tries them all).
"""

from rigforge.context import run_settings
from rigforge.operations.lock import release_deploy_lock, take_deploy_lock
from roles import base, engine_update, takeover, weights

# Validate the run's switches before any operation is planned (--data recipe=NAME switches the engine recipe).
settings = run_settings(takes=("recipe",))

take_deploy_lock()
takeover.apply_takeover(layers=("serving",), restore=False)
base.apply_base()
# Weights, the engine image (container engines: built or pulled; nothing for a native engine), the engine, its unit;
# a serving rig moved to another engine build is measured before and after (roles/engine_update.py).
weights.apply_weights()
engine_update.apply_engine_change(settings, move_unit=True)
release_deploy_lock()
