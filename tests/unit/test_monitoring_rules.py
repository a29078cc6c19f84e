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

from rigforge.monitoring.prometheus import RULES_NAME, render_dashboard, render_rules
from rigforge.profile.loader import load_profile
from rigforge.remote.health_metrics import HELP

REPO_ROOT = Path(__file__).resolve().parents[2]
RULES_TEST = REPO_ROOT / "tests" / "fixtures" / "monitoring" / "alerts_test.yml"
#: The promtool tests of group rigforge-gpu (the GPUs' own health, the watched disks).
GPU_RULES_TEST = RULES_TEST.with_name("alerts_gpu_test.yml")
RULES_TESTS = (RULES_TEST, GPU_RULES_TEST)
UNPACKED = REPO_ROOT / ".cache" / "promtool" / "usr" / "bin" / "promtool"
METRIC = re.compile(r"\brigforge_[a-z0-9_]+")
#: Series a rule may read beside rigforge's own: Prometheus' scrape health of the exporter.
PROMETHEUS_SERIES = {"up"}


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool") or (str(UNPACKED) if UNPACKED.exists() else None)
    if found is None:
        pytest.fail("promtool not found: scripts/bootstrap.sh unpacks it from Debian's prometheus package into "
                    ".cache/promtool (apt-get download prometheus)", pytrace=False)
    return found


def rules_beside_tests(tmp_path: Path) -> list[Path]:
    """The 2x-pix profile's rules rendered beside copies of the promtool test files; returns the test files."""
    (tmp_path / RULES_NAME).write_text(render_rules(load_profile("2x-pix")))
    for test in RULES_TESTS:
        shutil.copy(test, tmp_path / test.name)
    return [tmp_path / test.name for test in RULES_TESTS]


def all_rules(profile: str = "2x-pix") -> list[dict]:
    """Every rule of every group, as rendered for the profile."""
    return [rule for group in yaml.safe_load(render_rules(load_profile(profile)))["groups"] for rule in group["rules"]]


def test_the_test_file_assumes_the_shipped_windows() -> None:
    alerts = load_profile("2x-pix").monitoring.alerts
    assert (alerts.known_failure_window_s, alerts.engine_down_for_s, alerts.engine_restarts,
            alerts.disk_free_min_percent) == (3600, 60, 2, 10), "update tests/fixtures/monitoring/alerts_test.yml"


@pytest.mark.parametrize("profile", ["sandbox", "2x-pix", "4x-threadripper", "8x-turin"])
def test_promtool_check_rules(promtool: str, tmp_path: Path, profile: str) -> None:
    rules = tmp_path / RULES_NAME
    rules.write_text(render_rules(load_profile(profile)))
    run = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(all_rules(profile))} rules found" in run.stdout


def test_promtool_test_rules(promtool: str, tmp_path: Path) -> None:
    test_files = rules_beside_tests(tmp_path)
    run = subprocess.run([promtool, "test", "rules", *[test.name for test in test_files]], cwd=tmp_path,
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_alert_has_a_unit_test_and_a_docs_section() -> None:
    names = {rule["alert"] for rule in all_rules()}
    tested = {name for test in RULES_TESTS for name in re.findall(r"alertname: (\w+)", test.read_text())}
    untested = names - tested - {"RigforgeNodeExporterDown", "RigforgeGpuModelUnexpected", "RigforgeGpuSettingDrift"}
    assert not untested, untested
    docs = (REPO_ROOT / "docs" / "monitoring.md").read_text()
    assert not [name for name in names if f"### {name}" not in docs]


def test_rules_read_only_metrics_the_collector_writes() -> None:
    for rule in all_rules():
        named = set(METRIC.findall(rule["expr"]))
        assert named or PROMETHEUS_SERIES & set(re.findall(r"\b[a-z_]+(?=\{)", rule["expr"])), rule["alert"]
        assert named <= set(HELP), (rule["alert"], named - set(HELP))


def test_every_dashboard_panel_queries_metrics_the_collector_writes() -> None:
    dashboard = json.loads(render_dashboard(load_profile("sandbox")))
    titles = {panel["title"] for panel in dashboard["panels"]}
    for wanted in ("GPUs", "PCIe", "Power", "Temperature", "bench", "Known failures"):
        assert any(wanted in title for title in titles), wanted
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            named = set(METRIC.findall(target["expr"]))
            assert named, (panel["title"], target["expr"])
            assert named <= set(HELP), (panel["title"], named - set(HELP))
            assert 'rig="$rig"' in target["expr"], (panel["title"], target["expr"])
    variable = dashboard["templating"]["list"][1]["query"]["query"]
    assert set(METRIC.findall(variable)) <= set(HELP)
