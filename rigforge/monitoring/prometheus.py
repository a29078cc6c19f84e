"""The Prometheus side, rendered from profiles: scrape jobs and their targets, alerting rules, the dashboard,
Alertmanager's configuration, the exporters' units.

Every rig has its own scrape jobs (job names with the rig's name, targets in the rig's own file-discovery file),
relabelled to one ``job`` label for all rigs (``rigforge-node``, ``rigforge-engine``): two rigs' jobs never collide
in one Prometheus and the rules read one job. A rig's node_exporter and its engine's own ``/metrics`` are scraped
at the addresses they listen on; seen from another machine, a rig that listens on loopback only cannot be scraped,
and is left out with why.

    rigs = [scrape_target(name, profile, address, same_host=True)]
    text = render_prometheus_config(prometheus_profile, rigs, "rig1")
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from rigforge.gateway.monitoring import gateway_panels
from rigforge.monitoring.collector import PUBLISH_DIR, SERVICE, TIMER
from rigforge.monitoring.engine_series import engine_panels, engine_rule_context
from rigforge.profile import Profile
from rigforge.profile.access import listens_beyond_loopback
from rigforge.render import render
from rigforge.serving.api_key import needs_api_key

#: Where the prometheus role writes its configuration and rules (the package's own prometheus.yml is left alone).
PROMETHEUS_DIR = "/etc/prometheus/rigforge"
PROMETHEUS_CONFIG = f"{PROMETHEUS_DIR}/prometheus.yml"
ALERTMANAGER_CONFIG = f"{PROMETHEUS_DIR}/alertmanager.yml"
RULES_NAME = "rigforge-alerts.yml"
#: Each rig's file-discovery files (RIG-node.yml, RIG-engine.yml): Prometheus re-reads them when they change.
TARGETS_DIR = f"{PROMETHEUS_DIR}/targets"
#: The job labels every rig's series carry (the rules read these).
NODE_JOB = "rigforge-node"
ENGINE_JOB = "rigforge-engine"
#: The engine flag that makes each engine serve /metrics; None: it always does (vLLM).
METRICS_FLAGS = {"llama.cpp": "--metrics", "sglang": "--enable-metrics", "vllm": None}
#: Engines whose /metrics refuses a request without the API key when one is set: llama.cpp's server checks the
#: key on every endpoint but /health and /models; vLLM's --api-key guards only /v1/*; SGLang's lets /metrics through.
METRICS_ASK_KEY = {"llama.cpp": True, "sglang": False, "vllm": False}
METRICS_PATH = "/metrics"
#: Where the prometheus role keeps a copy of a rig's engine API key the scrape sends (0640 root:prometheus).
PROMETHEUS_KEYS_DIR = f"{PROMETHEUS_DIR}/keys"


@dataclass(frozen=True)
class ScrapeTarget:
    """One rig as Prometheus scrapes it.

    + name: the rig's inventory name without the connector's prefix (the ``rig`` label of its series)
    + node: node_exporter's host:port
    + engine: the engine's host:port, None where its recipe serves no metrics or it cannot be reached
    + engine_path: the engine's metrics path
    + key_file: the file holding the engine's API key where the engine's /metrics asks for one
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


def metrics_need_key(profile: Profile) -> bool:
    """Whether a scrape of the engine's /metrics must send its API key (the key set, and the engine asking)."""
    return needs_api_key(profile) and METRICS_ASK_KEY[profile.engine.kind]


def reachable(listen_host: str, address: str, same_host: bool) -> str | None:
    """host of a listener as the Prometheus host reaches it, None when it cannot (loopback on another machine)."""
    if same_host:
        return "127.0.0.1" if listen_host == "0.0.0.0" else listen_host
    return address if listens_beyond_loopback(listen_host) else None


def scrape_target(name: str, profile: Profile, address: str, same_host: bool) -> ScrapeTarget | None:
    """The rig's targets (None when its node_exporter listens on loopback and Prometheus runs elsewhere).

    + name: the rig's inventory name, without the connector's prefix
    + profile: the rig's profile
    + address: how the Prometheus host reaches the rig (its SSH host name)
    + same_host: Prometheus runs on this rig
    """
    exporter = profile.monitoring.node_exporter
    node_host = reachable(exporter.listen_host, address, same_host)
    if node_host is None:
        return None
    engine_host = reachable(profile.engine.host, address, same_host) if serves_metrics(profile) else None
    key_file = f"{PROMETHEUS_KEYS_DIR}/{name}" if engine_host and metrics_need_key(profile) else None
    return ScrapeTarget(name, f"{node_host}:{exporter.port}",
                        f"{engine_host}:{profile.engine.port}" if engine_host else None, key_file=key_file)


def published_target(name: str, profile: Profile, address: str) -> ScrapeTarget:
    """The rig as an owner's Prometheus reaches it: at ``address`` where node_exporter listens beyond loopback,
    else on loopback (only a Prometheus on the rig itself, or one through ``ssh -L``, can scrape it)."""
    beyond = listens_beyond_loopback(profile.monitoring.node_exporter.listen_host)
    target = scrape_target(name, profile, address, same_host=not beyond)
    assert target is not None  # the rig's own loopback, or an address it listens on
    return target


def target_files(rig: ScrapeTarget) -> dict[str, str]:
    """The rig's file-discovery files: file name in TARGETS_DIR -> text (the engine's only where it is scraped)."""
    files = {f"{rig.name}-node.yml": render_target_group(rig.node, rig.name)}
    if rig.engine:
        files[f"{rig.name}-engine.yml"] = render_target_group(rig.engine, rig.name)
    return files


def render_target_group(address: str, rig: str) -> str:
    """One file-discovery file: the target and its ``rig`` label (Prometheus' file_sd format, YAML)."""
    return f'- targets: ["{address}"]\n  labels: {{rig: "{rig}"}}\n'


def _scrape_context(profile: Profile, rigs: list[ScrapeTarget], rules: str) -> dict[str, object]:
    server = profile.monitoring.prometheus
    return {"rigs": [asdict(rig) for rig in rigs], "scrape_interval_s": server.scrape_interval_s,
            "evaluation_interval_s": server.evaluation_interval_s, "rules": rules, "targets_dir": TARGETS_DIR,
            "node_job": NODE_JOB, "engine_job": ENGINE_JOB}


def local_address(listen_host: str) -> str:
    """How a server on this host is reached from this host (0.0.0.0 listens on loopback too)."""
    return "127.0.0.1" if listen_host == "0.0.0.0" else listen_host


def render_prometheus_config(profile: Profile, rigs: list[ScrapeTarget], host_rig: str, extra_jobs: str = "",
                             extra_rule_files: tuple[str, ...] = ()) -> str:
    """The prometheus role's prometheus.yml: Alertmanager, the rules, Prometheus and Alertmanager themselves and
    the rigs' jobs.

    + host_rig: the name of the rig Prometheus runs on (the ``rig`` label of its own series)
    + extra_jobs, extra_rule_files: jobs (YAML under ``scrape_configs``) and rules files of others (the fleet's
      gateway: rigforge/gateway/monitoring.py)
    """
    monitoring = profile.monitoring
    context = _scrape_context(profile, rigs, f"{PROMETHEUS_DIR}/{RULES_NAME}")
    return render("monitoring/prometheus.yml.j2", profile, **context, host_rig=host_rig,
                  prometheus=f"{local_address(monitoring.prometheus.listen_host)}:{monitoring.prometheus.port}",
                  alertmanager=f"{local_address(monitoring.alertmanager.listen_host)}:{monitoring.alertmanager.port}",
                  extra_jobs=extra_jobs, extra_rule_files=extra_rule_files)


def render_scrape_snippet(profile: Profile, rig: ScrapeTarget) -> str:
    """The jobs an owner's Prometheus copies to scrape this rig (published on the rig, with its target files)."""
    return render("monitoring/scrape-config.yml.j2", profile,
                  **_scrape_context(profile, [rig], f"{PUBLISH_DIR}/{RULES_NAME}"), publish_dir=PUBLISH_DIR)


def render_rules(profile: Profile) -> str:
    """The alerting rules with the profile's windows (monitoring.alerts)."""
    monitoring = profile.monitoring
    alerts = monitoring.alerts
    scrape_s = monitoring.prometheus.scrape_interval_s
    return render("monitoring/alerts.yml.j2", profile, window_s=alerts.known_failure_window_s,
                  down_for_s=alerts.engine_down_for_s, restarts=alerts.engine_restarts,
                  disk_free_min_percent=f"{alerts.disk_free_min_percent:g}", service=SERVICE, timer=TIMER,
                  confirm_for_s=alerts.confirm_for_s, power_tolerance_w=f"{alerts.power_limit_tolerance_w:g}",
                  # Rigforge's series gone: longer than the gap after a boot before the timer's first write.
                  absent_for_s=3 * monitoring.interval_s, node_job=NODE_JOB, engine_job=ENGINE_JOB,
                  # The engine's /metrics is seen down at the next scrape, its unit or health only at the next
                  # write: waiting two writes longer than engine down lets the cause fire first and inhibit it.
                  scrape_down_for_s=max(alerts.confirm_for_s, alerts.engine_down_for_s + 2 * monitoring.interval_s),
                  **engine_rule_context(alerts, rate_window_s=max(300, 4 * scrape_s)))


def render_alertmanager_config(profile: Profile) -> str:
    """Alertmanager's configuration: the owner's receiver, grouping by rig, causes inhibiting their symptoms."""
    manager = profile.monitoring.alertmanager
    return render("monitoring/alertmanager.yml.j2", profile, manager=manager, receiver=manager.receiver)


def render_dashboard(profile: Profile) -> str:
    """The Grafana dashboard (JSON), one rig at a time (its ``rig`` variable)."""
    # The engine's panels (ids 13-16, two rows from y=48), then the fleet gateway's row (ids 17-20, from y=64).
    panels = engine_panels(first_id=13, first_y=48) + gateway_panels(first_id=17, first_y=64)
    return render("monitoring/grafana-dashboard.json.j2", profile, generated_panels=panels)


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


def render_alertmanager_dropin(profile: Profile) -> str:
    """Alertmanager's drop-in: rigforge's configuration file, the profile's listen address, no cluster port."""
    manager = profile.monitoring.alertmanager
    return render("monitoring/alertmanager.conf.j2", profile, config=ALERTMANAGER_CONFIG,
                  listen=f"{manager.listen_host}:{manager.port}")
