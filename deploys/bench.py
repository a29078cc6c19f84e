"""Run the smoke benchmark alone against the engine the rig serves now.

    pyinfra inventory/rig2x.py deploys/bench.py             # measure, judge, fail below the floors
    pyinfra inventory/rig2x.py deploys/bench.py --dry       # plans only the client files: nothing measured

Installs the client on the rig (when it changed), runs it against the engine on the rig's loopback,
and brings ``result.json``, ``summary.md`` and ``plot.png`` to ``results/<host>/<UTC stamp>/`` (folder
set by ``RIGFORGE_RESULTS_DIR``; ``results/<host>/latest`` is the newest). Fails when a sanity check or
a floor of the profile fails. deploys/full.py runs the same role last (switch ``--data bench=false``).
"""

from rigforge.context import run_settings
from rigforge.operations.lock import release_deploy_lock, take_deploy_lock
from roles import bench, takeover

# Validate the run's switches before any operation is planned.
run_settings(takes=())

take_deploy_lock()
takeover.apply_takeover(layers=())  # measures only: the table informs, nothing blocks
bench.apply_bench()
release_deploy_lock()
