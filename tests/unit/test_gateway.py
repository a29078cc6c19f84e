"""The fleet's gateway: its settings validated at load, its HAProxy configuration rendered (and checked by HAProxy
itself where it is installed), the runtime API's table parsed, who serves what decided."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from rigforge.fleet.rotation import RigState, drain_refusal, serving_table
from rigforge.gateway.haproxy import GatewayRig, group_routes, models_json, render_haproxy_config
from rigforge.gateway.monitoring import gateway_target, render_gateway_job, render_gateway_rules
from rigforge.monitoring.prometheus import render_prometheus_config
from rigforge.profile.loader import ProfileError, load_profile
from rigforge.remote.gateway_runtime import servers
from tests.unit.test_monitoring_rules import promtool  # noqa: F401  (the fixture: promtool's path)

GPU_PROFILES = ["2x-pix", "4x-threadripper", "8x-turin"]


def rigs(run_dir: str = "/run/rigforge-gateway") -> list[GatewayRig]:
    return [GatewayRig("rig-a", "10.0.0.2", 8000, "qwen", keyed=True, run_dir=run_dir),
            GatewayRig("rig-b", "10.0.0.3", 8000, "qwen", keyed=True, run_dir=run_dir),
            GatewayRig("rig-c", "10.0.0.4", 8080, "gemma-3-270m", keyed=False, run_dir=run_dir)]


def test_one_route_per_model_with_every_rig_that_serves_it() -> None:
    routes = group_routes(rigs())
    assert [(route.model, [rig.name for rig in route.rigs]) for route in routes] == [
        ("qwen", ["rig-a", "rig-b"]), ("gemma-3-270m", ["rig-c"])]
    assert json.loads(models_json(routes))["data"][1]["id"] == "gemma-3-270m"


@pytest.mark.parametrize("profile_name", ["sandbox", *GPU_PROFILES])
def test_the_configuration_names_files_for_every_key_and_holds_none(profile_name: str) -> None:
    profile = load_profile(profile_name, {"gateway": {"install": True, "users": ["alice", "bob"]}})
    text = render_haproxy_config(profile, group_routes(rigs()))
    assert "-f /etc/rigforge/secrets/gateway/users/alice" in text and "users/bob" in text
    assert "map(/etc/rigforge/secrets/gateway/rigs/rig-a.map)" in text
    assert "rig-c.map" not in text  # its engine asks for no key
    # Health checks reach the engine itself; requests go through the rig's hop (which adds its key).
    assert "server rig-a unix@/run/rigforge-gateway/hop-rig-a.sock check addr 10.0.0.2 port 8000" in text
    assert "retry-on conn-failure empty-response response-timeout" in text
    assert f"timeout server {profile.gateway.response_timeout_s}s" in text
    assert f"timeout check {profile.gateway.health.timeout_s}s" in text


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="HAProxy is not installed on this machine")
def test_haproxy_itself_accepts_the_configuration(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.mkdir()
    (users / "owner").write_text("k\n")
    text = render_haproxy_config(load_profile("sandbox"), group_routes(rigs(str(tmp_path))),
                                 admin_socket=str(tmp_path / "admin.sock"), state_file=str(tmp_path / "state"),
                                 user_key_dir=str(users))
    for rig in ("rig-a", "rig-b"):
        (tmp_path / f"{rig}.map").write_text(f"{rig} secret\n")
        text = text.replace(f"/etc/rigforge/secrets/gateway/rigs/{rig}.map", str(tmp_path / f"{rig}.map"))
    (tmp_path / "haproxy.cfg").write_text(text)
    checked = subprocess.run(["haproxy", "-c", "-f", str(tmp_path / "haproxy.cfg")], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    assert "after a 'use_backend' rule" not in checked.stderr  # every rule runs where it is written


@pytest.mark.parametrize(("overrides", "field"), [
    ({"gateway": {"health": {"timeout_s": 9}}}, "gateway.health.timeout_s"),
    ({"gateway": {"package": "nginx"}}, "gateway.package"),
    ({"gateway": {"users": []}}, "gateway.users"),
    ({"gateway": {"users": ["Alice Smith"]}}, "gateway.users.0"),
    ({"gateway": {"users": ["alice", "alice"]}}, "gateway.users"),
    ({"gateway": {"port": 0}}, "gateway.port"),
])
def test_bad_gateway_settings_fail_at_load_naming_the_file_and_field(overrides: dict, field: str) -> None:
    with pytest.raises(ProfileError) as raised:
        load_profile("sandbox", overrides, overrides_source="inventory host 'gw' profile_overrides")
    assert f"inventory host 'gw' profile_overrides: {field}:" in str(raised.value)


STAT = ("# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,"
        "check_status\n"
        "rigforge-fleet,FRONTEND,,,3,5,,,,,,,,,,,,OPEN,\n"
        "model-qwen,rig-a,0,0,2,4,,,,,,,,,,,,UP,L7OK\n"
        "model-qwen,rig-b,0,0,0,4,,,,,,,,,,,,DRAIN,L7OK\n"
        "model-qwen,BACKEND,0,0,2,4,,,,,,,,,,,,UP,\n"
        "rig-rig-a,rig-a,0,0,2,4,,,,,,,,,,,,UP,\n")


def test_the_runtime_apis_table_is_read_per_rig_of_each_model() -> None:
    assert servers(STAT) == [
        {"backend": "model-qwen", "rig": "rig-a", "status": "UP", "in_flight": 2, "check": "L7OK"},
        {"backend": "model-qwen", "rig": "rig-b", "status": "DRAIN", "in_flight": 0, "check": "L7OK"}]


def test_the_last_rig_in_rotation_for_a_model_is_not_drained_unless_asked() -> None:
    table = [RigState("model-qwen", "rig-a", "UP", 2), RigState("model-qwen", "rig-b", "DRAIN", 0),
             RigState("model-gemma", "rig-c", "DOWN", 0)]
    assert "last rig in rotation for qwen" in (drain_refusal(table, "rig-a", allow_last=False) or "")
    assert drain_refusal(table, "rig-a", allow_last=True) is None
    assert drain_refusal(table, "rig-b", allow_last=False) is None  # already out: nothing more is lost
    assert serving_table(table) == "qwen: rig-a (in rotation, 2 in flight), rig-b (drained); gemma: no rig in " \
                                   "rotation (rig-c down)"


def test_gpu_profiles_load_with_the_gateway_on() -> None:
    for name in GPU_PROFILES:
        assert load_profile(name, {"gateway": {"install": True}}).gateway.install
    with pytest.raises(ProfileError):
        load_profile("2x-pix", {"gateway": {"install": "yes please"}})


def test_the_gateways_rules_pass_promtool_and_fire_on_a_rig_out_of_rotation(
        tmp_path: Path, promtool: str) -> None:  # noqa: F811 (the fixture imported above)

    profile = load_profile("sandbox", {"gateway": {"install": True, "alerts": {"out_of_rotation_for_s": 120}}})
    (tmp_path / "rules.yml").write_text(render_gateway_rules(profile))
    (tmp_path / "test.yml").write_text(
        "rule_files: [rules.yml]\nevaluation_interval: 30s\ntests:\n  - interval: 30s\n    input_series:\n"
        "      - series: 'haproxy_server_status{proxy=\"model-gemma\",server=\"rig-b\",state=\"UP\"}'\n"
        "        values: '1 0 0 0 0 0 0 0'\n"
        "      - series: 'haproxy_backend_active_servers{proxy=\"model-gemma\"}'\n"
        "        values: '2 1 1 1 1 1 1 1'\n"
        "    alert_rule_test:\n"
        "      - {eval_time: 60s, alertname: RigOutOfRotation, exp_alerts: []}\n"
        "      - eval_time: 180s\n        alertname: RigOutOfRotation\n        exp_alerts:\n"
        "          - exp_labels: {severity: warning, proxy: model-gemma, server: rig-b, state: UP}\n"
        "            exp_annotations: {summary: \"rig-b out of the gateway's rotation for model-gemma longer than "
        "120 s (gateway.alerts.out_of_rotation_for_s)\"}\n"
        "      - {eval_time: 180s, alertname: ModelWithoutRig, exp_alerts: []}\n")
    checked = subprocess.run([promtool, "test", "rules", str(tmp_path / "test.yml")], capture_output=True,
                             text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_monitoring_prometheus_scrapes_the_gateway_beside_the_rigs() -> None:
    prometheus = load_profile("sandbox", {"monitoring": {"prometheus": {"install": True}, "alertmanager": {
        "receiver": {"webhook_urls": ["http://127.0.0.1:9/hook"]}}}})
    gateway = load_profile("sandbox", {"gateway": {"install": True, "metrics_listen_host": "0.0.0.0"}})
    assert gateway_target(load_profile("sandbox"), "10.0.0.9", same_host=False) is None  # loopback elsewhere
    target = gateway_target(gateway, "10.0.0.9", same_host=False)
    assert target == "10.0.0.9:8405"
    text = render_prometheus_config(prometheus, [], "gw", render_gateway_job(prometheus, "gw", target),
                                    ("/etc/prometheus/rigforge/rigforge-gateway-alerts.yml",))
    config = yaml.safe_load(text)
    assert config["rule_files"][1] == "/etc/prometheus/rigforge/rigforge-gateway-alerts.yml"
    job = next(job for job in config["scrape_configs"] if job["job_name"] == "rigforge-gateway")
    assert job["static_configs"][0]["targets"] == ["10.0.0.9:8405"]
