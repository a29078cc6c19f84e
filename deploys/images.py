"""Provision the container layer only: base, the Docker engine (+ NVIDIA toolkit) and the engine image.

    pyinfra inventory/rig2x.py deploys/images.py --dry --diff   # see the Dockerfile and build plan
    pyinfra inventory/rig2x.py deploys/images.py                # build (30-90 minutes the first time)
"""

from rigforge.context import run_settings
from rigforge.operations.lock import release_deploy_lock, take_deploy_lock
from roles import base, container, images, takeover

# Validate the run's switches before any operation is planned.
run_settings(takes=())

take_deploy_lock()
takeover.apply_takeover(layers=("container",))
base.apply_base()
container.apply_container()
images.apply_images()
release_deploy_lock()
