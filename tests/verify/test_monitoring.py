"""What the monitoring role promises (deploys/monitoring.py): the timer runs, the textfile is fresh, node_exporter
serves it, and the collector's files, units and config are the profile's.

Skipped where the profile turns monitoring off, or the rig was never given deploys/monitoring.py (no timer unit).
"""

from __future__ import annotations

import pytest

from rigforge.monitoring.collector import COLLECTOR_CONFIG, TIMER, collector_config, textfile_path
from rigforge.profile import Profile
from rigforge.render import render
from roles.monitoring import EXPORTER_UNIT, render_units


@pytest.fixture(scope="module")
def monitored(host, profile: Profile) -> None:
    if not profile.monitoring.enabled:
        pytest.skip(f"profile {profile.name} turns monitoring off")
    if not host.file(f"/etc/systemd/system/{TIMER}").exists:
        pytest.skip("deploys/monitoring.py was never run on this rig")


def test_units_and_config_are_the_profiles(host, profile: Profile, monitored: None) -> None:
    for path, content in render_units(profile).items():
        assert host.file(path).content_string == content, f"{path} differs from what the profile renders"
    wanted = render("monitoring/collector.json.j2", profile, config=collector_config(profile))
    assert host.file(COLLECTOR_CONFIG).content_string == wanted, f"{COLLECTOR_CONFIG} differs from the profile's"


def test_the_timer_runs_and_the_textfile_is_fresh(host, profile: Profile, monitored: None) -> None:
    timer = host.service(TIMER)
    assert timer.is_enabled and timer.is_running, f"{TIMER} is not enabled and active"
    path = textfile_path(profile)
    age = int(host.check_output(f"echo $(( $(date +%s) - $(stat -c %Y {path}) ))"))
    assert age <= 3 * profile.monitoring.interval_s, f"{path} was written {age} s ago"


def test_node_exporter_serves_the_textfile(host, profile: Profile, monitored: None) -> None:
    exporter = profile.monitoring.node_exporter
    if exporter.install:
        assert host.service(EXPORTER_UNIT).is_running, f"{EXPORTER_UNIT} is not running"
    address = "127.0.0.1" if exporter.listen_host == "0.0.0.0" else exporter.listen_host
    served = host.check_output(f"python3 -c \"import urllib.request; print(urllib.request.urlopen("
                               f"'http://{address}:{exporter.port}/metrics', timeout=10).read().decode())\"")
    assert "rigforge_health_metrics_last_run_timestamp_seconds" in served
    assert "node_textfile_scrape_error 0" in served, "node_exporter could not read the textfile"
