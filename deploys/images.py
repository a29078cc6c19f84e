"""Provision the container layer only: base, the Docker engine (+ NVIDIA toolkit) and the engine image.

    pyinfra inventory/rig2x.py deploys/images.py --dry --diff   # see the Dockerfile and build plan
    pyinfra inventory/rig2x.py deploys/images.py                # build (30-90 minutes the first time)
    pyinfra inventory/rig2x.py deploys/images.py --data rebuild=true --data on_regression=rollback

On a rig whose engine serves, a new build (a rebuild from moved git refs, a changed patch or build arg) is measured
before and after and the unit moved to it (roles/engine_update.py); a rig that serves nothing only gets the image.
"""

from rigforge.context import run_settings
from rigforge.operations.lock import release_deploy_lock, take_deploy_lock
from roles import base, container, engine_update, takeover

# Validate the run's switches before any operation is planned.
settings = run_settings(takes=())

take_deploy_lock()
takeover.apply_takeover(layers=("container",))
base.apply_base()
container.apply_container()
engine_update.apply_engine_change(settings, move_unit=False)
release_deploy_lock()
