"""The profile's ``monitoring`` section: the rig watched between deploys (deploys/monitoring.py, docs/monitoring.md).

A timer on the rig writes the checks that can drift into node_exporter's textfile collector every
``interval_s``; Prometheus (the owner's, or the one the ``prometheus`` role installs where
``prometheus.install`` is set) scrapes it and evaluates the shipped alerting rules with the windows below.
That Prometheus sends what fires to the distribution's Alertmanager beside it (``alertmanager``), which notifies
the receiver the owner names. Bad combinations (a window shorter than two scrapes, which could never see a
change; a Prometheus installed with nobody to notify) fail at load.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from rigforge.profile.types import AbsPath, FieldError, HttpUrl, Port, StrictModel

#: An IPv4 address to listen on (127.0.0.1: loopback only; 0.0.0.0: every interface).
ListenHost = Annotated[str, Field(pattern=r"^[0-9]{1,3}(\.[0-9]{1,3}){3}$")]
Seconds = Annotated[int, Field(ge=1, le=86400)]
#: An e-mail address as Alertmanager's to/from take it (one address, no display name).
EmailAddress = Annotated[str, Field(pattern=r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+$")]
#: host:port of an SMTP server (the host's own MTA by default).
HostPort = Annotated[str, Field(pattern=r"^[A-Za-z0-9.-]+:[0-9]{1,5}$")]


class NodeExporter(StrictModel):
    # true: rigforge installs the distribution's node exporter and owns its unit's listen address and
    # textfile directory; false: the owner runs one, rigforge only writes its textfile into textfile_dir.
    install: bool
    listen_host: ListenHost
    port: Port
    textfile_dir: AbsPath


class PrometheusServer(StrictModel):
    # true on the one host of an inventory that runs the distribution's Prometheus, scraping every rig.
    install: bool
    listen_host: ListenHost
    port: Port
    scrape_interval_s: Seconds
    evaluation_interval_s: Seconds


class Receiver(StrictModel):
    # Where Alertmanager posts every notification (its webhook format); a URL that carries a token belongs in the
    # Prometheus host's overrides, outside the repository: it is written only into alertmanager.yml (0640).
    webhook_urls: list[HttpUrl]
    # Addresses that get every notification by e-mail, sent through smarthost (the host's MTA).
    email_to: list[EmailAddress]
    email_from: EmailAddress | None
    smarthost: HostPort
    # Where the always-firing Watchdog goes instead of the receiver above (a dead man's switch service that
    # alerts when the pings stop); None: the receiver above gets it every watchdog_repeat_s.
    watchdog_webhook_url: HttpUrl | None


class Alertmanager(StrictModel):
    # Where the Alertmanager on the Prometheus host listens (loopback unless told, as Prometheus).
    listen_host: ListenHost
    port: Port
    # Alertmanager's route timings: wait before a new group's first notice, between notices of a changed group,
    # and before repeating an unchanged one.
    group_wait_s: Seconds
    group_interval_s: Seconds
    repeat_interval_s: Seconds
    # Seconds between two notices of the always-firing Watchdog.
    watchdog_repeat_s: Seconds
    receiver: Receiver

    @model_validator(mode="after")
    def _email_has_a_sender(self) -> Alertmanager:
        if self.receiver.email_to and self.receiver.email_from is None:
            raise FieldError("must be set where email_to names an address (the notices' From:)",
                             ("monitoring", "alertmanager", "receiver", "email_from"))
        return self


class Alerts(StrictModel):
    # Seconds a known-failure line keeps its alert firing after it was written to a log.
    known_failure_window_s: Seconds
    # Seconds the engine must be down (health endpoint or unit) before its alert fires.
    engine_down_for_s: Annotated[int, Field(ge=0, le=86400)]
    # Automatic restarts of the engine within known_failure_window_s that count as restarting.
    engine_restarts: Annotated[int, Field(ge=1, le=1000)]
    # Percent of a filesystem (weights, JIT caches) that must stay free.
    disk_free_min_percent: Annotated[float, Field(gt=0, lt=100)]
    # Seconds a condition one sample can get wrong (one failed nvidia-smi query, one missed scrape) must hold
    # before its alert fires.
    confirm_for_s: Annotated[int, Field(ge=0, le=86400)]
    # Watts a GPU's power limit may differ from gpus.power_limit_w before it counts as drift.
    power_limit_tolerance_w: Annotated[float, Field(ge=0, le=100)]
    # Seconds the engine's own signs of saturation (requests waiting, KV cache full, TTFT/ITL p95 over the
    # limits below) must last before their warnings fire.
    engine_saturated_for_s: Seconds
    # KV-cache use (0..1) that counts as full.
    kv_cache_full_ratio: Annotated[float, Field(gt=0, le=1)]
    # p95 time to first token and p95 inter-token latency (seconds) over which the engine is too slow.
    ttft_p95_max_s: Annotated[float, Field(gt=0)]
    itl_p95_max_s: Annotated[float, Field(gt=0)]


class Monitoring(StrictModel):
    enabled: bool
    interval_s: Annotated[int, Field(ge=5, le=3600)]
    node_exporter: NodeExporter
    prometheus: PrometheusServer
    alertmanager: Alertmanager
    alerts: Alerts

    @model_validator(mode="after")
    def _windows_see_two_samples(self) -> Monitoring:
        # increase() over a window needs two samples of a changed series in it: two scrapes and two writes.
        shortest = 2 * max(self.interval_s, self.prometheus.scrape_interval_s)
        if self.alerts.known_failure_window_s < shortest:
            raise FieldError(f"must be at least {shortest} s: two of monitoring.interval_s and "
                             "monitoring.prometheus.scrape_interval_s, the fewest samples a change shows in",
                             ("monitoring", "alerts", "known_failure_window_s"))
        receiver = self.alertmanager.receiver
        if self.enabled and self.prometheus.install and not (receiver.webhook_urls or receiver.email_to):
            raise FieldError("name a webhook_urls entry or an email_to address: the Prometheus this host installs "
                             "(monitoring.prometheus.install) would fire alerts that notify nobody",
                             ("monitoring", "alertmanager", "receiver"))
        return self
