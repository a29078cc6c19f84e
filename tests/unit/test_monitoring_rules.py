"""The alerting rules and the dashboard: promtool's own check and unit tests, and every query naming real metrics.

promtool comes from Debian's prometheus package: on PATH, or unpacked by scripts/bootstrap.sh into
.cache/promtool (the binary alone: installing the package would start a Prometheus server on the test machine).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from rigforge.gateway.monitoring import GATEWAY_SERIES
from rigforge.monitoring.engine_series import ENGINE_SERIES
from rigforge.monitoring.prometheus import RULES_NAME, render_dashboard, render_rules
from rigforge.profile.loader import load_profile
from rigforge.remote.health_metrics import HELP

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "monitoring"
#: promtool's unit tests of the rules, one file per group or two.
RULES_TESTS = sorted(FIXTURES.glob("alerts*_test.yml"))
UNPACKED = REPO_ROOT / ".cache" / "promtool" / "usr" / "bin" / "promtool"
METRIC = re.compile(r"\brigforge_[a-z0-9_]+")
#: Series a rule may read beside rigforge's own: scrape health, node_exporter's textfile error and boot time,
#: Alertmanager's delivery failures, and the engines' own (rigforge/monitoring/engine_series.py).
PROMETHEUS_SERIES = {"up", "node_textfile_scrape_error", "node_boot_time_seconds",
                     "alertmanager_notifications_failed_total"}


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool") or (str(UNPACKED) if UNPACKED.exists() else None)
    if found is None:
        pytest.fail("promtool not found: scripts/bootstrap.sh unpacks it from Debian's prometheus package into "
                    ".cache/promtool (apt-get download prometheus)", pytrace=False)
    return found


ENGINE_NAMES = {series for by_engine in ENGINE_SERIES.values() for series in by_engine.values()}
SERIES = re.compile(r"\b[a-z_]+:[a-z_]+|\b[a-z_]+(?=\{|\s|\)|$)")


def all_rules() -> list[dict]:
    """Every rule of every group, the 2x-pix profile's rendering."""
    groups = yaml.safe_load(render_rules(load_profile("2x-pix")))["groups"]
    return [rule for group in groups for rule in group["rules"]]


def rules_beside_tests(tmp_path: Path) -> list[str]:
    """The 2x-pix profile's rules rendered beside copies of the promtool test files; returns their names."""
    (tmp_path / RULES_NAME).write_text(render_rules(load_profile("2x-pix")))
    for test in RULES_TESTS:
        shutil.copy(test, tmp_path / test.name)
    return [test.name for test in RULES_TESTS]


def test_the_test_file_assumes_the_shipped_windows() -> None:
    alerts = load_profile("2x-pix").monitoring.alerts
    monitoring = load_profile("2x-pix").monitoring
    assert (alerts.known_failure_window_s, alerts.engine_down_for_s, alerts.engine_restarts,
            alerts.disk_free_min_percent, alerts.confirm_for_s, alerts.power_limit_tolerance_w,
            alerts.engine_saturated_for_s, alerts.kv_cache_full_ratio, alerts.ttft_p95_max_s, alerts.itl_p95_max_s,
            monitoring.interval_s, monitoring.prometheus.scrape_interval_s) == (
        3600, 60, 2, 10, 120, 1, 600, 0.95, 10, 0.2, 30, 30), "update tests/fixtures/monitoring/alerts*_test.yml"


@pytest.mark.parametrize("profile", ["sandbox", "2x-pix", "4x-threadripper", "8x-turin"])
def test_promtool_check_rules(promtool: str, tmp_path: Path, profile: str) -> None:
    rules = tmp_path / RULES_NAME
    rules.write_text(render_rules(load_profile(profile)))
    run = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(all_rules())} rules found" in run.stdout


def test_promtool_test_rules(promtool: str, tmp_path: Path) -> None:
    tests = rules_beside_tests(tmp_path)
    run = subprocess.run([promtool, "test", "rules", *tests], cwd=tmp_path, capture_output=True, text=True,
                         check=False)
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_alert_has_a_unit_test_and_a_docs_section() -> None:
    names = {rule["alert"] for rule in all_rules()}
    tests = "".join(test.read_text() for test in RULES_TESTS)
    # each alert both fires (an expected alert under its name) and stays silent somewhere (exp_alerts: [])
    fires = set(re.findall(r"alertname: (\w+)\n\s+exp_alerts:\n", tests))
    silent = set(re.findall(r"alertname: (\w+), exp_alerts: \[\]", tests))
    assert not names - fires, names - fires
    assert not names - silent - {"Watchdog"}, names - silent
    docs = (REPO_ROOT / "docs" / "monitoring.md").read_text()
    assert not [name for name in names if f"### {name}" not in docs]


def test_rules_read_only_metrics_the_collector_writes() -> None:
    for rule in all_rules():
        named = set(METRIC.findall(rule["expr"]))
        others = {name for name in SERIES.findall(rule["expr"]) if name in PROMETHEUS_SERIES or ":" in name}
        assert named or others or rule["alert"] == "Watchdog", rule["alert"]
        assert named <= set(HELP), (rule["alert"], named - set(HELP))
        assert {name.removesuffix("_bucket") for name in others if ":" in name} <= ENGINE_NAMES, rule["alert"]


def test_every_dashboard_panel_queries_metrics_the_collector_writes() -> None:
    dashboard = json.loads(render_dashboard(load_profile("sandbox")))
    titles = {panel["title"] for panel in dashboard["panels"]}
    for wanted in ("GPUs", "PCIe", "Power", "Temperature", "bench", "Known failures", "tokens per second",
                   "waiting", "KV-cache", "time to first token", "Gateway: requests", "Gateway: errors",
                   "Gateway: average time", "Gateway: this rig in rotation"):
        assert any(wanted in title for title in titles), wanted
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            named = set(METRIC.findall(target["expr"]))
            engines = {name.removesuffix("_bucket") for name in re.findall(r"\b[a-z_]+:[a-z_]+", target["expr"])}
            gateway = set(re.findall(r"\bhaproxy_[a-z_]+", target["expr"]))
            assert named or engines or gateway, (panel["title"], target["expr"])
            assert named <= set(HELP), (panel["title"], named - set(HELP))
            assert engines <= ENGINE_NAMES, (panel["title"], engines - ENGINE_NAMES)
            assert gateway <= set(GATEWAY_SERIES), (panel["title"], gateway - set(GATEWAY_SERIES))
            if gateway:  # the gateway's series name the rig as their server, in every model's backend
                assert 'proxy=~"model-.+", server="$rig"' in target["expr"], (panel["title"], target["expr"])
            else:
                assert 'rig="$rig"' in target["expr"], (panel["title"], target["expr"])
    variable = dashboard["templating"]["list"][1]["query"]["query"]
    assert set(METRIC.findall(variable)) <= set(HELP)
