"""Provision a rig end to end from its profile.

    pyinfra inventory/rig2x.py deploys/full.py --dry --diff   # see every change
    pyinfra inventory/rig2x.py deploys/full.py                # apply

Switches (``--data key=value``): allow_reboot, skip_preflight, bench, verify_weights, recipe (rigforge/context.py).
"""

from rigforge.context import current_profile, run_settings
from rigforge.operations.lock import release_deploy_lock, take_deploy_lock
from roles import bench, container, drain, engine_update, host, preflight, takeover, weights

# Validate the run's switches before any operation is planned (--data recipe=NAME switches the engine recipe).
settings = run_settings(takes=("recipe",))

# One deploy at a time per host: a host another run is deploying stops here (rigforge/operations/lock.py).
take_deploy_lock()

# What the owner already installed, read before any change: one table; stops on what must not be replaced.
takeover.apply_takeover(layers=("host", "container", "serving"), restore=False)

# --- preflight ---
# First: judge the host before anything changes; a blocking failure stops this host here
# (--data skip_preflight=true reports it and goes on). See deploys/preflight.py.
preflight.apply_preflight()
# --- end preflight ---

# --- host layer ---
# Base packages, modprobe, the NVIDIA driver and CUDA, the kernel command line, tuning, NCCL; then one reboot
# if (and only if) a boot-affecting input changed. See deploys/host.py.
host.apply_host()
# --- end host layer ---

# --- container layer ---
# The Docker engine with NVIDIA's container toolkit (daemon reloaded only when the nvidia runtime must be
# loaded). See deploys/images.py.
container.apply_container()
# --- end container layer ---

# --- serving layer ---
# The model's weights, then the engine image (built under a content-hash tag only when an input changed: 30-90
# minutes the first time, with the JIT cache volume emptied when the image changes), the engine, and its systemd
# service, (re)started only when one of them changed and waited for until healthy; a serving rig moved to another
# engine build is measured before and after (roles/engine_update.py). See deploys/serve.py.
weights.apply_weights()
# A serving rig whose engine restarts leaves the fleet gateway's rotation first and returns after the bench below.
engine_update.apply_engine_change(settings, move_unit=True, benched_after=settings.bench)
# --- end serving layer ---

# --- bench ---
# Last: measures the engine the layers above left running; a failed check or floor fails the deploy.
if settings.bench:
    bench.apply_bench()
    # Only a rig this run took out, and only once its bench passed (a failed bench fails the deploy before this).
    drain.put_back(current_profile(), "its bench passed")
# --- end bench ---

release_deploy_lock()
