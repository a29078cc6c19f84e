"""Prometheus role (optional): the distribution's Prometheus and Alertmanager on the host whose profile sets
``monitoring.prometheus.install``, scraping every rig of the inventory, evaluating rigforge's alerting rules and
notifying the receiver the profile names (``monitoring.alertmanager.receiver``).

Its configuration lives beside the package's own (/etc/prometheus/rigforge/: prometheus.yml and the rules), and a
drop-in points the unit at it with the profile's listen address (loopback unless told; the drop-in is written
before the package is installed, so its first start already listens there). The package's prometheus.yml and
/etc/default/prometheus are left as they are. Prometheus is reloaded (SIGHUP, its own way to read the config
again) when the configuration, the rules or a rig's targets changed, restarted when the drop-in did. Alertmanager
the same way: a drop-in (its listen address, no cluster port), its configuration beside Prometheus' (0640
root:prometheus: a receiver's URL may carry a token, and the dry run names the file without its lines).

Each rig is scraped where it listens: on this host itself at its loopback address; on another machine at its SSH
host name, which needs that rig's node_exporter (and engine) to listen beyond loopback: a rig that does not is
left out, and the run says so. Where the engine asks for its API key (``engine.auth``), the scrape sends it: the
engine on this host has its key copied on the rig for Prometheus (0640 root:prometheus); another rig's key is
named for the owner to copy (rigforge never carries a key between machines).
"""

from __future__ import annotations

from typing import Any

from pyinfra import host, inventory, logger
from pyinfra.api import deploy
from pyinfra.api.host import Host
from pyinfra.operations import files, systemd

from rigforge.context import current_profile
from rigforge.gateway.monitoring import RULES_NAME as GATEWAY_RULES
from rigforge.gateway.monitoring import gateway_target, render_gateway_job, render_gateway_rules
from rigforge.monitoring.collector import PUBLISH_DIR
from rigforge.monitoring.prometheus import (
    ALERTMANAGER_CONFIG,
    PROMETHEUS_CONFIG,
    PROMETHEUS_DIR,
    PROMETHEUS_KEYS_DIR,
    RULES_NAME,
    TARGETS_DIR,
    ScrapeTarget,
    render_alertmanager_config,
    render_alertmanager_dropin,
    render_prometheus_config,
    render_prometheus_dropin,
    render_rules,
    scrape_target,
    target_files,
)
from rigforge.operations import apt
from rigforge.operations.files import managed_file
from rigforge.operations.followup import follow_up
from rigforge.operations.secret_copy import secret_copy
from rigforge.profile import Profile
from rigforge.serving.api_key import KEY_FILE

PACKAGE = "prometheus"
UNIT = "prometheus.service"
DROPIN = f"/etc/systemd/system/{UNIT}.d/rigforge.conf"
ALERTMANAGER_PACKAGE = "prometheus-alertmanager"
ALERTMANAGER_UNIT = "prometheus-alertmanager.service"
ALERTMANAGER_DROPIN = f"/etc/systemd/system/{ALERTMANAGER_UNIT}.d/rigforge.conf"
CONNECTOR_PREFIX = "@rigforge/"


def rig_name(rig: Host | Any) -> str:
    """The rig's inventory name without the connector's prefix (the ``rig`` label of its series)."""
    return rig.name.removeprefix(CONNECTOR_PREFIX)


def inventory_targets(profile_of: dict[str, Profile]) -> list[ScrapeTarget]:
    """Every rig of the run's inventory with monitoring on, as this host scrapes it (others said and left out).

    + profile_of: rig name -> its profile (its default recipe laid over it)
    """
    targets = []
    for rig in inventory:
        name = rig_name(rig)
        profile = profile_of.get(name)
        if profile is None or not profile.monitoring.enabled:
            continue
        address = str(rig.data.get("ssh_hostname") or name)
        target = scrape_target(name, profile, address, same_host=rig.name == host.name)
        if target is None:
            host.log(f"rig {name} left out of the scrape: its node_exporter listens on "
                     f"{profile.monitoring.node_exporter.listen_host} only (monitoring.node_exporter.listen_host)",
                     logger.warning)
            continue
        if target.key_file and rig.name != host.name:
            host.log(f"rig {name}: its engine asks for its API key; Prometheus reads it from {target.key_file} "
                     f"(copy the rig's {KEY_FILE} there, mode 0640 root:prometheus: rigforge never carries a key "
                     "between machines)", logger.warning)
        targets.append(target)
    return targets


def inventory_profiles() -> dict[str, Profile]:
    """The profile of every host of the inventory (this host's with this run's recipe)."""
    profiles = {}
    for rig in inventory:
        data = rig.data.get("rigforge_profile")
        if rig.name == host.name:
            profiles[rig_name(rig)] = current_profile()
        elif data:
            profiles[rig_name(rig)] = Profile.model_validate(data).with_recipe(None)
    return profiles


def gateway_watch(profile: Profile, profile_of: dict[str, Profile]) -> tuple[str, dict[str, str]]:
    """The fleet gateway's scrape job and rules file (path -> text) for this Prometheus; nothing without one."""
    for rig in inventory:
        gateway = profile_of.get(rig_name(rig))
        if gateway is None or not gateway.gateway.install:
            continue
        target = gateway_target(gateway, str(rig.data.get("ssh_hostname") or rig_name(rig)), rig.name == host.name)
        if target is None:
            host.log(f"the gateway on {rig_name(rig)} left out of the scrape: its exporter listens on "
                     f"{gateway.gateway.metrics_listen_host} only (gateway.metrics_listen_host)", logger.warning)
            return "", {}
        return (render_gateway_job(profile, rig_name(rig), target),
                {f"{PROMETHEUS_DIR}/{GATEWAY_RULES}": render_gateway_rules(gateway)})
    return "", {}


@deploy("Prometheus")
def apply_prometheus() -> None:
    """Install and configure Prometheus where the profile asks for it; nothing elsewhere."""
    profile = current_profile()
    if not (profile.monitoring.enabled and profile.monitoring.prometheus.install):
        host.noop("Prometheus: not this host (monitoring.prometheus.install)")
        return
    dropin = managed_file(name=f"Write Prometheus' drop-in ({DROPIN})", dest=DROPIN,
                          content=render_prometheus_dropin(profile))
    manager_dropin = managed_file(name=f"Write Alertmanager's drop-in ({ALERTMANAGER_DROPIN})",
                                  dest=ALERTMANAGER_DROPIN, content=render_alertmanager_dropin(profile))
    files.directory(name=f"Create {PROMETHEUS_DIR}", path=PROMETHEUS_DIR, mode="755", user="root", group="root")
    profiles = inventory_profiles()
    targets = inventory_targets(profiles)
    gateway_job, gateway_rules = gateway_watch(profile, profiles)  # the fleet's gateway, where there is one
    config = managed_file(name=f"Write {PROMETHEUS_CONFIG}", dest=PROMETHEUS_CONFIG,
                          content=render_prometheus_config(profile, targets, rig_name(host), gateway_job,
                                                           tuple(gateway_rules)))
    rules = managed_file(name=f"Write {PROMETHEUS_DIR}/{RULES_NAME}", dest=f"{PROMETHEUS_DIR}/{RULES_NAME}",
                         content=render_rules(profile))
    rules_written = [rules] + [managed_file(name=f"Write {path}", dest=path, content=text)
                               for path, text in gateway_rules.items()]
    write_target_files(targets)
    packages = apt.packages(name="Install Prometheus", packages=[PACKAGE])
    # Alertmanager's configuration before its package (whose first start reads it), after Prometheus' (whose
    # package makes the prometheus group that may read it).
    manager_config = managed_file(name=f"Write {ALERTMANAGER_CONFIG}", dest=ALERTMANAGER_CONFIG,
                                  content=render_alertmanager_config(profile), mode="640", group=PACKAGE,
                                  show_diff=False)
    manager_package = apt.packages(name="Install Alertmanager", packages=[ALERTMANAGER_PACKAGE],
                                   refreshed_by=[packages])
    own_key = next((target.key_file for target in targets if target.name == rig_name(host) and target.key_file), None)
    if own_key:  # the engine on this host asks for its key: Prometheus gets a copy it may read
        files.directory(name=f"Create {PROMETHEUS_KEYS_DIR}", path=PROMETHEUS_KEYS_DIR, mode="750", user="root",
                        group=PACKAGE)
        secret_copy(name=f"Engine API key for Prometheus ({own_key})", source=KEY_FILE, dest=own_key, group=PACKAGE)
    follow_up(name="Reload systemd (a drop-in changed)", commands=["systemctl daemon-reload"],
              triggers=[dropin, manager_dropin], what="systemctl daemon-reload")
    follow_up(name="Restart Alertmanager (its drop-in changed)", commands=[f"systemctl restart {ALERTMANAGER_UNIT}"],
              triggers=[manager_dropin, manager_package], what="restart Alertmanager")
    systemd.service(name=f"Run {ALERTMANAGER_UNIT}", service=ALERTMANAGER_UNIT, enabled=True, running=True)
    follow_up(name="Reload Alertmanager (its configuration changed)",
              commands=[f"systemctl reload {ALERTMANAGER_UNIT}"], triggers=[manager_config], what="reload Alertmanager",
              superseded_by=[manager_dropin, manager_package])
    follow_up(name="Restart Prometheus (its drop-in changed)", commands=[f"systemctl restart {UNIT}"],
              triggers=[dropin, packages], what="restart Prometheus")
    systemd.service(name=f"Run {UNIT}", service=UNIT, enabled=True, running=True)
    follow_up(name="Reload Prometheus (its configuration or rules changed)", commands=[f"systemctl reload {UNIT}"],
              triggers=[config, *rules_written], what="reload Prometheus", superseded_by=[dropin, packages])
    monitoring = profile.monitoring
    host.log(f"Prometheus on {host.name}: {monitoring.prometheus.listen_host}:{monitoring.prometheus.port}, "
             f"Alertmanager {monitoring.alertmanager.listen_host}:{monitoring.alertmanager.port}; "
             f"rules also published in {PUBLISH_DIR}")


def write_target_files(targets: list[ScrapeTarget]) -> None:
    """Each rig's file-discovery files in TARGETS_DIR (Prometheus reads a change without a reload)."""
    files.directory(name=f"Create {TARGETS_DIR}", path=TARGETS_DIR, mode="755", user="root", group="root")
    for target in targets:
        for name, text in target_files(target).items():
            managed_file(name=f"Write {TARGETS_DIR}/{name}", dest=f"{TARGETS_DIR}/{name}", content=text)
