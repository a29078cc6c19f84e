"""Serve the profile's model: base, weights, the engine (image or native server) and its systemd service.

    pyinfra inventory/sandbox.py deploys/serve.py --dry --diff   # see every change
    pyinfra inventory/sandbox.py deploys/serve.py                # apply

Ends with the server running under systemd and answering its health endpoint. On a GPU rig it expects
the host and container layers in place (driver, Docker): deploys/full.py runs everything, with the same
roles in its serving layer. Switches (``--data key=value``): verify_weights (re-hash every weights file
and fetch again the ones that changed).
"""

from rigforge.context import run_settings
from rigforge.operations.lock import release_deploy_lock, take_deploy_lock
from roles import base, engine, images, service, takeover, weights

# Validate the run's switches before any operation is planned.
run_settings()

take_deploy_lock()
takeover.apply_takeover(layers=("serving",))
base.apply_base()
weights.apply_weights()
images.apply_images()  # container engines: build or pull the image; nothing for a native engine
engine.apply_engine()
service.apply_service()
release_deploy_lock()
