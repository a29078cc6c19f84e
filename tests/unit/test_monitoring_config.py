"""Prometheus' and Alertmanager's configurations as rendered: two rigs' published snippets merged into one
Prometheus pass ``promtool check config`` (their own tool), the prometheus role's own configuration too, and the
Alertmanager configuration passes ``amtool check-config``.

promtool and amtool come from Debian's packages (prometheus, prometheus-alertmanager): on PATH, or unpacked by
scripts/bootstrap.sh into .cache/ (the binaries alone).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from rigforge.monitoring.collector import PUBLISH_DIR
from rigforge.monitoring.prometheus import (
    ENGINE_JOB,
    NODE_JOB,
    PROMETHEUS_DIR,
    RULES_NAME,
    published_target,
    render_alertmanager_config,
    render_prometheus_config,
    render_rules,
    render_scrape_snippet,
    scrape_target,
    target_files,
)
from rigforge.profile import Profile
from rigforge.profile.loader import load_profile

REPO_ROOT = Path(__file__).resolve().parents[2]


def tool(name: str, package: str) -> str:
    unpacked = REPO_ROOT / ".cache" / name / "usr" / "bin" / name
    found = shutil.which(name) or (str(unpacked) if unpacked.exists() else None)
    if found is None:
        pytest.fail(f"{name} not found: scripts/bootstrap.sh unpacks it from Debian's {package} package into "
                    f".cache/{name}", pytrace=False)
    return found


def with_monitoring(profile: Profile, **changes: object) -> Profile:
    data = profile.model_dump(mode="json")
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split("__")
        for key in parents:
            node = node[key]
        node[last] = value
    return Profile.model_validate(data)


def check_config(config: str, root: Path) -> subprocess.CompletedProcess[str]:
    """promtool check config on ``config`` with its absolute paths moved under ``root`` (files as on the host)."""
    path = root / "prometheus.yml"
    path.write_text(config.replace(PROMETHEUS_DIR, f"{root}{PROMETHEUS_DIR}").replace(PUBLISH_DIR,
                                                                                         f"{root}{PUBLISH_DIR}"))
    return subprocess.run([tool("promtool", "prometheus"), "check", "config", str(path)], capture_output=True,
                          text=True, check=False)


def install_files(root: Path, rules_profile: Profile, rigs: list) -> None:
    """The rules and the rigs' file-discovery files where the configurations name them, under ``root``."""
    for directory in (PUBLISH_DIR, PROMETHEUS_DIR):
        (root / directory.lstrip("/")).mkdir(parents=True, exist_ok=True)
        (root / directory.lstrip("/") / RULES_NAME).write_text(render_rules(rules_profile))
    targets = root / PROMETHEUS_DIR.lstrip("/") / "targets"
    targets.mkdir(parents=True, exist_ok=True)
    for rig in rigs:
        for name, text in target_files(rig).items():
            (targets / name).write_text(text)
        if rig.key_file:
            key = root / rig.key_file.lstrip("/")
            key.parent.mkdir(parents=True, exist_ok=True)
            key.write_text("0" * 64)


def two_rigs() -> list[tuple[str, Profile]]:
    """A llama.cpp rig that asks for its key and listens beyond loopback, and a vLLM rig on loopback."""
    sandbox = with_monitoring(load_profile("sandbox"), engine__auth={"mode": "key"}, engine__host="0.0.0.0",
                              monitoring__node_exporter__listen_host="0.0.0.0")
    return [("rig2x-a", sandbox), ("rig4x-b", load_profile("4x-threadripper"))]


def test_two_rigs_published_snippets_merge_into_one_prometheus(tmp_path: Path) -> None:
    rigs = [(name, profile, published_target(name, profile, f"{name}.lan")) for name, profile in two_rigs()]
    merged: dict[str, list] = {"rule_files": [], "scrape_configs": []}
    for _, profile, target in rigs:
        snippet = yaml.safe_load(render_scrape_snippet(profile, target))
        merged["rule_files"] += [path for path in snippet["rule_files"] if path not in merged["rule_files"]]
        merged["scrape_configs"] += snippet["scrape_configs"]
    assert merged["rule_files"] == [f"{PUBLISH_DIR}/{RULES_NAME}"]  # the rules where every rig publishes them
    jobs = [job["job_name"] for job in merged["scrape_configs"]]
    assert len(jobs) == len(set(jobs)) == 4, jobs
    assert {job["relabel_configs"][0]["replacement"] for job in merged["scrape_configs"]} == {NODE_JOB, ENGINE_JOB}
    first = rigs[0][2]
    assert first.node == "rig2x-a.lan:9100" and first.engine == "rig2x-a.lan:8080", first  # beyond loopback
    assert first.key_file == f"{PROMETHEUS_DIR}/keys/rig2x-a"  # llama.cpp asks for its key on /metrics
    assert rigs[1][2].node == "127.0.0.1:9100" and rigs[1][2].key_file is None  # loopback; vLLM's /metrics is open
    install_files(tmp_path, rigs[0][1], [target for *_, target in rigs])
    run = check_config(yaml.safe_dump(merged), tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


def test_a_key_is_copied_only_for_an_engine_whose_metrics_ask_for_it() -> None:
    for profile_name in ("4x-threadripper", "2x-pix"):  # vLLM, SGLang
        keyed = with_monitoring(load_profile(profile_name), engine__auth={"mode": "key"})
        target = scrape_target("r", keyed, "r", same_host=True)
        assert target is not None and target.key_file is None, (profile_name, keyed.engine.kind)


def test_the_prometheus_roles_configuration_passes_promtool(tmp_path: Path) -> None:
    profile = load_profile("sandbox")
    rigs = [scrape_target(name, rig, name, same_host=name == "rig2x-a") for name, rig in two_rigs()]
    targets = [rig for rig in rigs if rig is not None]
    install_files(tmp_path, profile, targets)
    config = render_prometheus_config(profile, targets, "rig2x-a")
    parsed = yaml.safe_load(config)
    assert parsed["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["127.0.0.1:9093"]
    assert {"rigforge-prometheus", "rigforge-alertmanager"} <= {job["job_name"] for job in parsed["scrape_configs"]}
    run = check_config(config, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("receiver", [
    {"webhook_urls": ["http://127.0.0.1:9999/alerts"]},
    {"email_to": ["ops@example.org"], "email_from": "rig@example.org",
     "watchdog_webhook_url": "https://deadman.example.org/ping/abc"},
])
def test_alertmanager_configuration_passes_amtool(tmp_path: Path, receiver: dict[str, object]) -> None:
    base = load_profile("sandbox").monitoring.alertmanager.receiver.model_dump(mode="json")
    profile = with_monitoring(load_profile("sandbox"), monitoring__alertmanager__receiver={**base, **receiver})
    text = render_alertmanager_config(profile)
    path = tmp_path / "alertmanager.yml"
    path.write_text(text)
    run = subprocess.run([tool("amtool", "prometheus-alertmanager"), "check-config", str(path)], capture_output=True,
                         text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    parsed = yaml.safe_load(text)
    assert parsed["route"]["group_by"] == ["rig"]
    gpu_missing = next(rule for rule in parsed["inhibit_rules"] if "RigforgeGpuMissing" in rule["source_matchers"][0])
    assert "EngineDown" in gpu_missing["target_matchers"][0] and gpu_missing["equal"] == ["rig"]


def test_a_prometheus_with_nobody_to_notify_fails_at_load() -> None:
    with pytest.raises(ValueError, match="monitoring.alertmanager.receiver|notify nobody"):
        with_monitoring(load_profile("sandbox"), monitoring__prometheus__install=True)
