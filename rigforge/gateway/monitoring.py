"""The gateway seen by the monitoring's Prometheus: its scrape job and a small rules group of its own.

HAProxy's built-in exporter answers ``/metrics`` on ``gateway.metrics_listen_host:metrics_port``: per rig of each
model (``proxy="model-MODEL"``, ``server=RIG``) its requests (``haproxy_server_http_responses_total``), errors
(``haproxy_server_response_errors_total``, ``haproxy_server_connection_errors_total``), time
(``haproxy_server_total_time_average_seconds``) and state (``haproxy_server_status{state=...}``).

The dashboard's gateway row (``gateway_panels``) shows one rig as the gateway sees it, in every model's backend it
serves: its requests by code, its errors, the average time of its answers, and whether it is in rotation. Its
series carry the rig as ``server`` (the rig's inventory name: roles/gateway.py's ``server_name``), which the
dashboard's ``rig`` variable selects.

Example::

    job = render_gateway_job(prometheus_profile, "gw", gateway_profile, "10.0.0.9", same_host=False)
    rules = render_gateway_rules(gateway_profile)
"""

from __future__ import annotations

from rigforge.profile import Profile
from rigforge.profile.access import listens_beyond_loopback
from rigforge.render import PanelSpec, render, timeseries_panels

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


#: One rig in every model's backend at the gateway (the hops' own ``rig-RIG`` backends left out): the dashboard's
#: ``rig`` variable names it.
_SERVER = '{proxy=~"model-.+", server="$rig"}'
#: The series of HAProxy's built-in exporter the row reads (its own names, as the alerts read them).
GATEWAY_SERIES = ("haproxy_server_http_responses_total", "haproxy_server_response_errors_total",
                  "haproxy_server_connection_errors_total", "haproxy_server_total_time_average_seconds",
                  "haproxy_server_status")
_RATE = "[$__rate_interval]"
#: title, unit, then (legend, expression) per line.
_PANELS: list[PanelSpec] = [
    ("Gateway: requests to this rig per second, by answer", "reqps", [
        ("{{proxy}} {{code}}", f"sum by (proxy, code) (rate(haproxy_server_http_responses_total{_SERVER}{_RATE}))")]),
    ("Gateway: errors on this rig per second (response, connection)", "reqps", [
        ("{{proxy}} response errors", f"sum by (proxy) (rate(haproxy_server_response_errors_total{_SERVER}{_RATE}))"),
        ("{{proxy}} connection errors",
         f"sum by (proxy) (rate(haproxy_server_connection_errors_total{_SERVER}{_RATE}))")]),
    ("Gateway: average time of this rig's answers (last 1024)", "s", [
        ("{{proxy}}", f"max by (proxy) (haproxy_server_total_time_average_seconds{_SERVER})")]),
    ("Gateway: this rig in rotation (1) or not (0: down, drained, out)", "short", [
        ("{{proxy}}", 'max by (proxy) (haproxy_server_status{proxy=~"model-.+", server="$rig", state="UP"})')]),
]


def gateway_panels(first_id: int, first_y: int) -> list[dict[str, object]]:
    """The dashboard's gateway row (Grafana JSON), two panels a row from ``first_y``; empty where the fleet has no
    gateway or the Prometheus does not scrape it.

    + first_id: the first panel's id (the dashboard's ids must differ)
    + first_y: the grid row the first panel starts on
    """
    return timeseries_panels(_PANELS, first_id, first_y)
