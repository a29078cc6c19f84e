"""The profile's ``monitoring`` section: the rig watched between deploys (deploys/monitoring.py, docs/monitoring.md).

A timer on the rig writes the checks that can drift into node_exporter's textfile collector every
``interval_s``; Prometheus (the owner's, or the one the ``prometheus`` role installs where
``prometheus.install`` is set) scrapes it and evaluates the shipped alerting rules with the windows below.
Bad combinations (a window shorter than two scrapes, which could never see a change) fail at load.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from rigforge.profile.types import AbsPath, FieldError, Port, StrictModel

#: An IPv4 address to listen on (127.0.0.1: loopback only; 0.0.0.0: every interface).
ListenHost = Annotated[str, Field(pattern=r"^[0-9]{1,3}(\.[0-9]{1,3}){3}$")]
Seconds = Annotated[int, Field(ge=1, le=86400)]


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


class Alerts(StrictModel):
    # Seconds a known-failure line keeps its alert firing after it was written to a log.
    known_failure_window_s: Seconds
    # Seconds the engine must be down (health endpoint or unit) before its alert fires.
    engine_down_for_s: Annotated[int, Field(ge=0, le=86400)]
    # Automatic restarts of the engine within known_failure_window_s that count as restarting.
    engine_restarts: Annotated[int, Field(ge=1, le=1000)]
    # Percent of a filesystem (weights, JIT caches) that must stay free.
    disk_free_min_percent: Annotated[float, Field(gt=0, lt=100)]


class Monitoring(StrictModel):
    enabled: bool
    interval_s: Annotated[int, Field(ge=5, le=3600)]
    node_exporter: NodeExporter
    prometheus: PrometheusServer
    alerts: Alerts

    @model_validator(mode="after")
    def _windows_see_two_samples(self) -> Monitoring:
        # increase() over a window needs two samples of a changed series in it: two scrapes and two writes.
        shortest = 2 * max(self.interval_s, self.prometheus.scrape_interval_s)
        if self.alerts.known_failure_window_s < shortest:
            raise FieldError(f"must be at least {shortest} s: two of monitoring.interval_s and "
                             "monitoring.prometheus.scrape_interval_s, the fewest samples a change shows in",
                             ("monitoring", "alerts", "known_failure_window_s"))
        return self
