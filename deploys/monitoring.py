"""Watch the rig between deploys: node_exporter with rigforge's health metrics, alerting rules, a dashboard.

    pyinfra inventory/rig2x.py deploys/monitoring.py --dry --diff   # every file it would write
    pyinfra inventory/rig2x.py deploys/monitoring.py                # apply

Every rig gets the distribution's node_exporter (on loopback unless the profile says otherwise) and a timer that
writes the checks that can drift, the known failures of its logs, the engine's health and the last bench into
its textfile collector every ``monitoring.interval_s`` (docs/monitoring.md). The rules, a scrape config and the
Grafana dashboard are published in /etc/rigforge/monitoring/ for an owner's Prometheus; the host whose profile
sets ``monitoring.prometheus.install`` (per-host overrides in the inventory) also gets the distribution's
Prometheus, scraping every rig of the inventory.
"""

from rigforge.context import run_settings
from rigforge.operations.lock import release_deploy_lock, take_deploy_lock
from roles import monitoring, prometheus

# Validate the run's switches before any operation is planned.
run_settings(takes=())

take_deploy_lock()
monitoring.apply_monitoring()
prometheus.apply_prometheus()
release_deploy_lock()
