"""Monitoring role: node_exporter, and rigforge's health metrics written into its textfile collector by a timer.

On a rig whose profile has ``monitoring.enabled``:

- **node_exporter** (``monitoring.node_exporter.install``): the distribution's package, with a drop-in that sets
  its listen address (loopback unless the profile says otherwise: a trade-off line says what that gives up) and
  textfile directory. The drop-in is written before the package is installed, so the exporter's first start
  already listens where the profile says. Without ``install`` the owner's exporter is left alone and only the
  textfile is written into its directory.
- **the collector**: ``rigforge/remote/health_metrics.py`` with its helpers under /opt/rigforge/lib/monitoring,
  its config (/etc/rigforge/monitoring/collector.json, from the profile) and a oneshot service with a start
  timeout, started by a timer every ``monitoring.interval_s``; run once at once when any of them changed.
- **published for the owner's Prometheus and Grafana**: the alerting rules, a scrape config to copy (this rig's
  own jobs, named after the rig without the connector's prefix) with its file-discovery files (targets/: the
  rig's address where it listens beyond loopback) and the dashboard, in /etc/rigforge/monitoring/.

``systemctl daemon-reload`` and restarts run only when a unit or drop-in changed. A profile that turns monitoring
off has the timer and its service removed, and the textfile they wrote (else node_exporter would serve its last
values, engine up included, for ever); the exporter's drop-in stays (without it the package's exporter would
listen on every interface), and so does the package: removing a package is never a side effect.
"""

from __future__ import annotations

from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import files, systemd

from rigforge.checks.tradeoffs import metrics_beyond_loopback
from rigforge.context import current_profile
from rigforge.monitoring.collector import (
    COLLECTOR_CONFIG,
    COLLECTOR_DIR,
    COLLECTOR_FILES,
    COLLECTOR_SCRIPT,
    PUBLISH_DIR,
    SERVICE,
    START_TIMEOUT_S,
    TIMER,
    collector_config,
    textfile_path,
)
from rigforge.monitoring.prometheus import (
    RULES_NAME,
    ScrapeTarget,
    published_target,
    render_dashboard,
    render_exporter_dropin,
    render_rules,
    render_scrape_snippet,
    target_files,
)
from rigforge.operations import apt
from rigforge.operations.files import managed_file
from rigforge.operations.followup import follow_up
from rigforge.operations.managed import absent
from rigforge.profile import Profile
from rigforge.render import render
from roles.prometheus import rig_name

REPO_ROOT = Path(__file__).resolve().parents[1]
UNIT_DIR = "/etc/systemd/system"
EXPORTER_PACKAGE = "prometheus-node-exporter"
EXPORTER_UNIT = "prometheus-node-exporter.service"
EXPORTER_DROPIN = f"{UNIT_DIR}/{EXPORTER_UNIT}.d/rigforge.conf"
SCRAPE_SNIPPET = f"{PUBLISH_DIR}/scrape-config.yml"
PUBLISHED_TARGETS = f"{PUBLISH_DIR}/targets"
DASHBOARD = f"{PUBLISH_DIR}/grafana-dashboard.json"


def render_collector_file(profile: Profile, remote_path: str) -> str:
    """One collector module as installed: the managed-by header, then the repository's source unchanged."""
    source = COLLECTOR_FILES[remote_path]
    return render("monitoring/collector-module.py.j2", profile, source=source.read_text(),
                  source_name=source.relative_to(REPO_ROOT).as_posix(), service=SERVICE)


def render_units(profile: Profile) -> dict[str, str]:
    """The collector's service and timer: path -> text."""
    return {
        f"{UNIT_DIR}/{SERVICE}": render("monitoring/rigforge-health-metrics.service.j2", profile,
                                        script=COLLECTOR_SCRIPT, config=COLLECTOR_CONFIG, timer=TIMER,
                                        start_timeout_s=START_TIMEOUT_S),
        f"{UNIT_DIR}/{TIMER}": render("monitoring/rigforge-health-metrics.timer.j2", profile,
                                      interval_s=profile.monitoring.interval_s),
    }


def own_target(profile: Profile) -> ScrapeTarget:
    """This rig as the owner's Prometheus reaches it (the published snippet's targets): at its SSH host name where
    it listens beyond loopback, else on its loopback."""
    return published_target(rig_name(host), profile, str(host.data.get("ssh_hostname") or rig_name(host)))


def published_files(profile: Profile) -> dict[str, str]:
    """What the rig publishes for its owner's Prometheus and Grafana: path -> text."""
    target = own_target(profile)
    return {f"{PUBLISH_DIR}/{RULES_NAME}": render_rules(profile),
            SCRAPE_SNIPPET: render_scrape_snippet(profile, target),
            **{f"{PUBLISHED_TARGETS}/{name}": text for name, text in target_files(target).items()},
            DASHBOARD: render_dashboard(profile)}


@deploy("Monitoring")
def apply_monitoring() -> None:
    """node_exporter, the health-metrics collector and its timer, and the files published for the owner."""
    profile = current_profile()
    if not profile.monitoring.enabled:
        remove_monitoring()
        return
    for tradeoff in metrics_beyond_loopback(profile):
        host.log(tradeoff.line())
    exporter = profile.monitoring.node_exporter
    changed_units: list[OperationMeta] = []
    if exporter.install:
        changed_units.append(managed_file(name=f"Write node_exporter's drop-in ({EXPORTER_DROPIN})",
                                          dest=EXPORTER_DROPIN, content=render_exporter_dropin(profile)))
        apt.packages(name="Install node_exporter", packages=[EXPORTER_PACKAGE])
    files.directory(name=f"Create {exporter.textfile_dir}", path=exporter.textfile_dir, mode="755",
                    user="root", group="root")
    inputs = install_collector(profile)
    for path, text in render_units(profile).items():
        changed_units.append(managed_file(name=f"Write {path}", dest=path, content=text))
    follow_up(name="Reload systemd (unit files changed)", commands=["systemctl daemon-reload"],
              triggers=changed_units, what="systemctl daemon-reload")
    if exporter.install:
        follow_up(name="Restart node_exporter (its drop-in changed)", commands=[f"systemctl restart {EXPORTER_UNIT}"],
                  triggers=changed_units[:1], what="restart node_exporter")
        systemd.service(name=f"Run {EXPORTER_UNIT}", service=EXPORTER_UNIT, enabled=True, running=True)
    systemd.service(name=f"Run {TIMER}", service=TIMER, enabled=True, running=True)
    follow_up(name="Write the health metrics now (the collector changed)", commands=[f"systemctl start {SERVICE}"],
              triggers=[*inputs, *changed_units], what="write the health metrics")
    for path, text in published_files(profile).items():
        managed_file(name=f"Publish {path}", dest=path, content=text)


def install_collector(profile: Profile) -> list[OperationMeta]:
    """The collector's modules and config on the rig; returns their operations (a change reruns it)."""
    files.directory(name=f"Create {COLLECTOR_DIR}", path=COLLECTOR_DIR, mode="755", user="root", group="root")
    changed = [managed_file(name=f"Install {path}", dest=path, content=render_collector_file(profile, path),
                            mode="755" if path == COLLECTOR_SCRIPT else "644") for path in sorted(COLLECTOR_FILES)]
    changed.append(managed_file(name=f"Write {COLLECTOR_CONFIG}", dest=COLLECTOR_CONFIG,
                                content=render("monitoring/collector.json.j2", profile,
                                               config=collector_config(profile))))
    return changed


def remove_monitoring() -> None:
    """monitoring.enabled false: the timer and its service go, and the textfile they wrote (node_exporter would
    serve its last values for ever). The exporter's drop-in stays (without it the package's exporter would listen
    on every interface at its next start), and so do packages and published files."""
    profile = current_profile()
    removed = [absent(name=f"Remove {path} (monitoring off)", path=path, unit=unit)
               for path, unit in ((f"{UNIT_DIR}/{TIMER}", TIMER), (f"{UNIT_DIR}/{SERVICE}", None))]
    files.file(name="Remove rigforge's textfile (monitoring off: its values would be served for ever)",
               path=textfile_path(profile), present=False)
    follow_up(name="Reload systemd (unit files removed)", commands=["systemctl daemon-reload"], triggers=removed,
              what="systemctl daemon-reload")
