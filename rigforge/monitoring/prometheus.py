"""The Prometheus side, rendered from profiles: scrape jobs, alerting rules, the dashboard, the exporters' units.

A rig's node_exporter and its engine's own ``/metrics`` are scraped at the addresses they listen on; seen from
another machine, a rig that listens on loopback only cannot be scraped, and is left out with why.

    rigs = [scrape_target(name, profile, address, same_host=True)]
    text = render_prometheus_config(prometheus_profile, rigs)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from rigforge.monitoring.collector import SERVICE, TIMER
from rigforge.profile import Profile
from rigforge.profile.access import listens_beyond_loopback
from rigforge.render import render
from rigforge.serving.api_key import needs_api_key

#: Where the prometheus role writes its configuration and rules (the package's own prometheus.yml is left alone).
PROMETHEUS_DIR = "/etc/prometheus/rigforge"
PROMETHEUS_CONFIG = f"{PROMETHEUS_DIR}/prometheus.yml"
RULES_NAME = "rigforge-alerts.yml"
#: The engine flag that makes each engine serve /metrics; None: it always does (vLLM).
METRICS_FLAGS = {"llama.cpp": "--metrics", "sglang": "--enable-metrics", "vllm": None}
METRICS_PATH = "/metrics"
#: Where the prometheus role keeps a copy of a rig's engine API key the scrape sends (0640 root:prometheus).
PROMETHEUS_KEYS_DIR = f"{PROMETHEUS_DIR}/keys"


@dataclass(frozen=True)
class ScrapeTarget:
    """One rig as Prometheus scrapes it.

    + name: the rig's inventory name (the ``rig`` label of its series)
    + node: node_exporter's host:port
    + engine: the engine's host:port, None where its recipe serves no metrics or it cannot be reached
    + engine_path: the engine's metrics path
    + key_file: the file holding the engine's API key where the engine asks for one
    """

    name: str
    node: str
    engine: str | None
    engine_path: str = METRICS_PATH
    key_file: str | None = None


def serves_metrics(profile: Profile) -> bool:
    """Whether the profile's engine serves Prometheus metrics (its recipe's own flag: llama.cpp ``--metrics``,
    SGLang ``--enable-metrics``; vLLM always serves /metrics)."""
    flag = METRICS_FLAGS[profile.engine.kind]
    return flag is None or profile.engine.flags.get(flag) is True


def reachable(listen_host: str, address: str, same_host: bool) -> str | None:
    """host of a listener as the Prometheus host reaches it, None when it cannot (loopback on another machine)."""
    if same_host:
        return "127.0.0.1" if listen_host == "0.0.0.0" else listen_host
    return address if listens_beyond_loopback(listen_host) else None


def scrape_target(name: str, profile: Profile, address: str, same_host: bool) -> ScrapeTarget | None:
    """The rig's targets (None when its node_exporter listens on loopback and Prometheus runs elsewhere).

    + name: the rig's inventory name
    + profile: the rig's profile
    + address: how the Prometheus host reaches the rig (its SSH host name)
    + same_host: Prometheus runs on this rig
    """
    exporter = profile.monitoring.node_exporter
    node_host = reachable(exporter.listen_host, address, same_host)
    if node_host is None:
        return None
    engine_host = reachable(profile.engine.host, address, same_host) if serves_metrics(profile) else None
    key_file = f"{PROMETHEUS_KEYS_DIR}/{name}" if engine_host and needs_api_key(profile) else None
    return ScrapeTarget(name, f"{node_host}:{exporter.port}",
                        f"{engine_host}:{profile.engine.port}" if engine_host else None, key_file=key_file)


def _scrape_context(profile: Profile, rigs: list[ScrapeTarget]) -> dict[str, object]:
    server = profile.monitoring.prometheus
    return {"rigs": [asdict(rig) for rig in rigs], "scrape_interval_s": server.scrape_interval_s,
            "evaluation_interval_s": server.evaluation_interval_s, "rules": f"{PROMETHEUS_DIR}/{RULES_NAME}"}


def render_prometheus_config(profile: Profile, rigs: list[ScrapeTarget], extra_jobs: str = "",
                             extra_rule_files: tuple[str, ...] = ()) -> str:
    """The prometheus role's prometheus.yml: the rigs' jobs and the rules file.

    + extra_jobs, extra_rule_files: jobs (YAML under ``scrape_configs``) and rules files of others (the fleet's
      gateway: rigforge/gateway/monitoring.py)
    """
    return render("monitoring/prometheus.yml.j2", profile, **_scrape_context(profile, rigs), extra_jobs=extra_jobs,
                  extra_rule_files=extra_rule_files)


def render_scrape_snippet(profile: Profile, rig: ScrapeTarget) -> str:
    """The jobs an owner's Prometheus copies to scrape this rig (published on the rig)."""
    return render("monitoring/scrape-config.yml.j2", profile, **_scrape_context(profile, [rig]))


def render_rules(profile: Profile) -> str:
    """The alerting rules with the profile's windows (monitoring.alerts)."""
    monitoring = profile.monitoring
    alerts = monitoring.alerts
    return render("monitoring/alerts.yml.j2", profile, window_s=alerts.known_failure_window_s,
                  down_for_s=alerts.engine_down_for_s, restarts=alerts.engine_restarts,
                  disk_free_min_percent=f"{alerts.disk_free_min_percent:g}", service=SERVICE, timer=TIMER)


def render_dashboard(profile: Profile) -> str:
    """The Grafana dashboard (JSON), one rig at a time (its ``rig`` variable)."""
    return render("monitoring/grafana-dashboard.json.j2", profile)


def render_exporter_dropin(profile: Profile) -> str:
    """node_exporter's drop-in: the profile's listen address and textfile directory."""
    exporter = profile.monitoring.node_exporter
    return render("monitoring/node-exporter.conf.j2", profile, listen=f"{exporter.listen_host}:{exporter.port}",
                  textfile_dir=exporter.textfile_dir)


def render_prometheus_dropin(profile: Profile) -> str:
    """Prometheus' drop-in: rigforge's configuration file and the profile's listen address."""
    server = profile.monitoring.prometheus
    return render("monitoring/prometheus.conf.j2", profile, config=PROMETHEUS_CONFIG,
                  listen=f"{server.listen_host}:{server.port}")
