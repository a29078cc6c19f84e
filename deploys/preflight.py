"""Read-only preflight: is each host what its profile says? One table per host, nothing changed.

    pyinfra -y inventory/rig2x.py deploys/preflight.py                    # the table; exit 1 on a blocking failure
    pyinfra inventory/rig2x.py deploys/preflight.py --dry                 # the same, as a dry run (also exits 1)
    pyinfra -y inventory/rig2x.py deploys/preflight.py --data probe=true  # + GPU interconnect probe

Columns: check | expected (from the profile) | found | verdict | fix. ``fail (blocking)`` rows are
what no deploy can fix (missing or degraded GPUs, BAR1/ReBAR in the BIOS, GPU model, topology); a
host with one is counted as failed and ``deploys/full.py`` changes nothing on it. ``warn`` rows are
what the deploy changes (driver, kernel parameters, module options…) or advice.

Switches (``--data key=value``, see rigforge/context.py):
  skip_preflight=true   print the table but do not fail the host on blocking checks
  probe=true            run the interconnect probe: P2P bandwidth/latency per GPU pair and all-reduce
                        latency 8 KiB-1 MiB, each step under a hard timeout. It runs even where a
                        blocking row stops deploys (the probe, like the tables, changes nothing).
                        It runs in the engine's image (container engines) or with python3;
                        ``--data probe_python=PATH`` names the interpreter (a venv or system Python
                        with PyTorch) instead.
"""

from rigforge.context import run_settings
from rigforge.operations.lock import release_deploy_lock, take_deploy_lock
from roles import preflight, takeover

settings = run_settings(takes=())

take_deploy_lock()
if settings.probe:  # read-only like the tables: it runs before their stops, so a blocked rig is probed too
    preflight.probe_interconnect(name=preflight.PROBE_NAME, python=settings.probe_python or None)
takeover.apply_takeover(layers=("host", "container", "serving"), restore=False)  # read-only
preflight.apply_preflight()
release_deploy_lock()
