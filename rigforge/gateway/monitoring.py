"""The gateway seen by the monitoring's Prometheus: its scrape job and a small rules group of its own.

HAProxy's built-in exporter answers ``/metrics`` on ``gateway.metrics_listen_host:metrics_port``: per rig of each
model (``proxy="model-MODEL"``, ``server=RIG``) its requests (``haproxy_server_http_responses_total``), errors
(``haproxy_server_response_errors_total``, ``haproxy_server_connection_errors_total``), time
(``haproxy_server_total_time_average_seconds``) and state (``haproxy_server_status{state=...}``).

Example::

    job = render_gateway_job(prometheus_profile, "gw", gateway_profile, "10.0.0.9", same_host=False)
    rules = render_gateway_rules(gateway_profile)
"""

from __future__ import annotations

from rigforge.profile import Profile
from rigforge.profile.access import listens_beyond_loopback
from rigforge.render import render

RULES_NAME = "rigforge-gateway-alerts.yml"
#: Seconds a model may have no rig in rotation before its alert fires: two scrapes of the sandbox and GPU profiles.
NO_RIG_FOR_S = 60


def gateway_target(gateway: Profile, address: str, same_host: bool) -> str | None:
    """host:port the Prometheus host scrapes the gateway at; None when it listens on loopback of another host."""
    listen = gateway.gateway.metrics_listen_host
    if same_host:
        host = "127.0.0.1" if listen == "0.0.0.0" else listen
    elif listens_beyond_loopback(listen):
        host = address
    else:
        return None
    return f"{host}:{gateway.gateway.metrics_port}"


def render_gateway_job(prometheus: Profile, name: str, target: str) -> str:
    """The scrape job (YAML under ``scrape_configs``) for the gateway at ``target``."""
    return render("gateway/scrape-job.yml.j2", prometheus, name=name, target=target,
                  scrape_interval_s=prometheus.monitoring.prometheus.scrape_interval_s)


def render_gateway_rules(gateway: Profile) -> str:
    """The gateway's rules group with the profile's window (``gateway.alerts``)."""
    return render("gateway/alerts.yml.j2", gateway, out_of_rotation_for_s=gateway.gateway.alerts.out_of_rotation_for_s,
                  no_rig_for_s=NO_RIG_FOR_S)
