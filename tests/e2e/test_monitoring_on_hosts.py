"""Monitoring on a real sandbox host: node_exporter, Prometheus and Alertmanager from Debian's packages, installed
by the deploy, notifying a webhook receiver on the host.

Real here: Debian 12 with systemd, apt, Debian's prometheus-node-exporter 1.5, prometheus 2.42 and
prometheus-alertmanager 0.25, rigforge's timer and collector, llama.cpp's server (xllamacpp) under systemd and
its journal. The receiver is a few lines of Python's http.server on the host's loopback (RECEIVER), writing each
notification Alertmanager posts to a file: the owner's webhook, as Alertmanager sees one. One host, tests in
order, each starting where the last ended; short intervals through the profile (interval_s 10, scrapes and rule
evaluations every 2 s, confirm_for_s 4, engine_down_for_s 20, the engine's health timeout 30 s, Alertmanager's
group wait 1 s): the module took 282 s on the loaded 2-core CI machine. How long each alert took is printed,
not asserted beyond a bound a loaded machine keeps (two intervals plus LOADED_S: the collector, the scrapes, the
rule evaluations and each query's docker exec all stretch under load; no speed floors in tests):

1. serve, then deploys/monitoring.py; a second run plans nothing; Prometheus and Alertmanager listen on loopback
   only (no cluster port); Prometheus scrapes the rig, its engine, itself and Alertmanager; the CPU-only host says
   0 GPUs and no nvidia-smi; the receiver gets the Watchdog;
2. a healthy rig, and an engine restart that loads within its health timeout, notify nothing but the Watchdog
   (watched for engine_down_for_s and two intervals after the restart);
3. a known-failure line in the engine's journal raises its alert in Prometheus' API, and the alert clears once
   the line is older than the window;
4. rigforge.prom made unparseable (the timer stopped so nothing rewrites it) notifies RigforgeTextfileUnreadable;
5. the engine's unit stopped past its health timeout notifies RigforgeEngineDown, and its /metrics scrape down is
   held back by it in Alertmanager (inhibited); the collector's own CPU cost is read from its metrics;
6. the engine asking for its API key (``engine.auth: key``): its /metrics refuses a request without the key, and
   Prometheus scrapes it with the copy of the key the prometheus role made for it.

Stand-in: the planted line. The engine here does not fail by itself at runtime, so the test writes a line the
signatures know (``disk-full``: the example line of inventory/known-failures.yaml) from a process it moves into
the engine unit's cgroup: journald files it under the engine's unit as it would the engine's own output.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from rigforge.known_failures import known_signatures
from rigforge.sandbox import SandboxHost, exec_in
from rigforge.sandbox.model import ensure_gemma
from rigforge.serving.engines import UNIT_NAME
from tests.e2e.conftest import Sandbox
from tests.e2e.pyinfra_run import REPO_ROOT, assert_no_changes, run_pyinfra

DEPLOY = "deploys/monitoring.py"
INTERVAL_S = 10
WINDOW_S = 45
DOWN_FOR_S = 20
HEALTH_TIMEOUT_S = 30
#: What a loaded 2-core machine may add to two intervals before an alert shows in Prometheus' API.
LOADED_S = 60
#: The webhook receiver on the host's loopback, and the file it appends each notification to (one JSON a line).
RECEIVER = "http://127.0.0.1:9911/alerts"
RECEIVED = "/root/notifications.jsonl"
RECEIVER_SCRIPT = f"""import http.server
class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with open("{RECEIVED}", "ab") as handle:
            handle.write(body.replace(b"\\n", b" ") + b"\\n")
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", 9911), Receiver).serve_forever()
"""
#: Short intervals for the test; Prometheus and Alertmanager run on the rig itself (host overrides).
MONITORING = {"interval_s": INTERVAL_S,
              "prometheus": {"install": True, "scrape_interval_s": 2, "evaluation_interval_s": 2},
              "alertmanager": {"group_wait_s": 1, "group_interval_s": 2, "repeat_interval_s": 3600,
                               "watchdog_repeat_s": 3600, "receiver": {"webhook_urls": [RECEIVER]}},
              "alerts": {"known_failure_window_s": WINDOW_S, "engine_down_for_s": DOWN_FOR_S, "confirm_for_s": 4}}
PLANTED = "disk-full"
TEXTFILE = "/var/lib/prometheus/node-exporter/rigforge.prom"
#: Move this shell into the engine unit's cgroup (the systemd hierarchies of a hybrid or unified host: journald
#: names a line's unit from them) and log "$1" from there. Through systemd-cat's stream, held open 30 s: journald
#: reads the sender's unit from /proc/PID when it handles the message, and a datagram from ``logger``, gone by then
#: on a loaded machine, was filed under no unit (never seen by ``journalctl -u``); a stream's sender stays alive.
PLANT = f"""p=$(systemctl show -p MainPID --value {UNIT_NAME})
for line in $(grep -E '^(0:|[0-9]+:name=systemd:)' /proc/$p/cgroup); do
  case "$line" in 0::*) dir=/sys/fs/cgroup/unified;; *) dir=/sys/fs/cgroup/systemd;; esac
  [ -d "$dir" ] || dir=/sys/fs/cgroup
  echo $$ > "$dir${{line##*:}}/cgroup.procs" || exit 1
done
exec systemd-cat -t llama-server sh -c 'printf "%s\\n" "$1"; sleep 30' plant "$1"
"""


@dataclass
class Rig:
    host: SandboxHost
    inventory: Path
    overrides: dict[str, Any]

    def sh(self, command: str | list[str]) -> str:
        run = exec_in(self.host, command)
        assert run.returncode == 0, f"{command}: {run.stderr}"
        return run.stdout

    def api(self, path: str) -> Any:
        """Prometheus' HTTP API, asked on the rig (it listens on loopback only)."""
        script = ("import json, sys, urllib.request; "
                  "print(urllib.request.urlopen('http://127.0.0.1:9090' + sys.argv[1], timeout=10).read().decode())")
        return json.loads(self.sh(["python3", "-c", script, path]))["data"]

    def firing(self, alert: str, **labels: str) -> bool:
        return any(item["labels"].get("alertname") == alert and item["state"] == "firing"
                   and all(item["labels"].get(key) == value for key, value in labels.items())
                   for item in self.api("/api/v1/alerts")["alerts"])

    def value(self, query: str) -> float | None:
        result = self.api(f"/api/v1/query?query={quote(query)}")["result"]
        return float(result[0]["value"][1]) if result else None

    def notified(self) -> list[tuple[str, str]]:
        """(alertname, status) of every alert in every notification the receiver got, in order."""
        text = exec_in(self.host, f"cat {RECEIVED} 2>/dev/null").stdout
        return [(alert["labels"]["alertname"], alert["status"]) for line in text.splitlines() if line.strip()
                for alert in json.loads(line)["alerts"]]

    def manager_alerts(self) -> list[dict[str, Any]]:
        """Alertmanager's own view (API v2): each alert with its state (active, suppressed) and inhibitors."""
        script = ("import urllib.request; print(urllib.request.urlopen("
                  "'http://127.0.0.1:9093/api/v2/alerts', timeout=10).read().decode())")
        return json.loads(self.sh(["python3", "-c", script]))


def wait_for(condition: Any, seconds: float, what: str) -> float:
    """Poll ``condition`` every second; return the seconds it took, fail after ``seconds``."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if condition():
            return time.monotonic() - start
        time.sleep(1)
    pytest.fail(f"{what}: not within {seconds:g} s")


@pytest.fixture(scope="module")
def rig(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    model = ensure_gemma(REPO_ROOT / ".cache" / "models")
    host = sandbox.fresh_host("monitor")
    overrides = {"model": {"local_path": str(model)}, "engine": {"health_timeout_s": HEALTH_TIMEOUT_S},
                 "monitoring": MONITORING}
    inventory = sandbox.write_inventory(tmp_path_factory.mktemp("monitor") / "inventory.py", [host], "sandbox",
                                        overrides)
    run_pyinfra(inventory, "deploys/serve.py")
    started = exec_in(host, ["systemd-run", "--unit=owner-webhook", "python3", "-c", RECEIVER_SCRIPT])
    assert started.returncode == 0, started.stderr
    yield Rig(host, inventory, overrides)


def test_deploy_publishes_and_prometheus_scrapes_the_rig(rig: Rig) -> None:
    run_pyinfra(rig.inventory, DEPLOY)
    try:
        assert_no_changes(rig.inventory, DEPLOY)
    except AssertionError:  # the daemons' own words, for whoever reads the failure
        print(exec_in(rig.host, "systemctl --no-pager status prometheus.service prometheus-alertmanager.service; "
                                "journalctl --no-pager -n 30 -u prometheus-alertmanager.service").stdout)
        raise
    listeners = rig.sh("ss -ltnH")
    for port in (9100, 9090, 9093):
        assert re.search(rf"127\.0\.0\.1:{port}\b", listeners), (port, listeners)
    assert not re.search(r"(\*|0\.0\.0\.0|\[::\]):(9100|9090|9093|9094)\b", listeners), listeners
    assert ":9094" not in listeners, listeners  # Alertmanager's cluster port is off
    mode = rig.sh("stat -c '%a %U %G' /etc/prometheus/rigforge/alertmanager.yml").split()
    assert mode == ["640", "root", "prometheus"], mode
    assert rig.sh("systemctl is-active rigforge-health-metrics.timer").strip() == "active"
    served = rig.sh(["python3", "-c", "import urllib.request; print(urllib.request.urlopen("
                     "'http://127.0.0.1:9100/metrics', timeout=10).read().decode())"])
    assert "rigforge_engine_up 1" in served and "rigforge_gpus_found 0" in served
    age = float(rig.sh("echo $(( $(date +%s) - $(stat -c %Y /var/lib/prometheus/node-exporter/rigforge.prom) ))"))
    assert age <= 2 * INTERVAL_S, age  # the timer keeps it fresh
    wait_for(lambda: rig.value('rigforge_engine_up{job="rigforge-node"}') == 1, 30, "Prometheus scrapes the rig")
    # A CPU-only rig says so: 0 GPUs expected and found, no nvidia-smi, and no per-GPU series at all.
    assert rig.value("rigforge_gpus_expected") == 0 and rig.value("rigforge_nvidia_smi_present") == 0
    assert rig.api("/api/v1/query?query=rigforge_gpu_info")["result"] == []
    # llama.cpp's own --metrics: its job's first scrape may come up to a scrape interval after the node's.
    engine_job = f'up{{job="rigforge-engine",rig="{rig.host.name}"}}'
    wait_for(lambda: rig.value(engine_job) == 1, 30, "Prometheus scrapes the engine's /metrics")
    wait_for(lambda: rig.value('up{job="rigforge-alertmanager"}') == 1 and rig.value('up{job="rigforge-prometheus"}')
             == 1, 30, "Prometheus scrapes itself and Alertmanager")
    assert rig.value(f'llamacpp:requests_processing{{rig="{rig.host.name}"}}') is not None  # the engine's own series
    for group in rig.api("/api/v1/rules")["groups"]:
        for rule in group["rules"]:
            assert rule["health"] == "ok", rule
    took = wait_for(lambda: ("Watchdog", "firing") in rig.notified(), LOADED_S, "the receiver gets the Watchdog")
    print(f"Watchdog notified {took:.0f} s after the deploy's checks")


def test_a_healthy_rig_and_a_restart_within_the_health_timeout_notify_nothing(rig: Rig) -> None:
    rig.sh(f"systemctl restart {UNIT_NAME}")
    # Long enough for engine down to have fired had the restart counted: engine_down_for_s, two writes, load.
    time.sleep(DOWN_FOR_S + 2 * INTERVAL_S + 10)
    assert rig.value(f'rigforge_engine_up{{rig="{rig.host.name}"}}') == 1
    assert {name for name, _ in rig.notified()} == {"Watchdog"}, rig.notified()


def test_a_known_failure_line_fires_its_alert_and_clears_after_the_window(rig: Rig) -> None:
    line = next(s for s in known_signatures() if s.id == PLANTED).examples[0]
    assert not rig.firing("RigforgeKnownFailure", id=PLANTED)
    # The stand-in (module docstring): a process in the engine's cgroup writes the line to the journal.
    rig.sh(["sh", "-c", 'sh -c "$0" plant "$1" </dev/null >/dev/null 2>&1 &', PLANT, line])  # its stream in the back
    # journald files a datagram on its own time: wait until the engine's journal shows it.
    wait_for(lambda: line in rig.sh(f"journalctl -u {UNIT_NAME} -q -o cat --since -5min"), LOADED_S,
             "the line filed")
    took = wait_for(lambda: rig.firing("RigforgeKnownFailure", id=PLANTED), 2 * INTERVAL_S + LOADED_S,
                    "the alert fires")
    cleared = wait_for(lambda: not rig.firing("RigforgeKnownFailure", id=PLANTED),
                       WINDOW_S + 2 * INTERVAL_S + LOADED_S, "the alert clears")
    print(f"known failure {PLANTED}: firing {took:.0f} s after the line, cleared {cleared:.0f} s later "
          f"(interval {INTERVAL_S} s, window {WINDOW_S} s)")


def test_an_unparseable_textfile_notifies(rig: Rig) -> None:
    rig.sh("systemctl stop rigforge-health-metrics.timer && while systemctl is-active -q "
           "rigforge-health-metrics.service; do sleep 1; done")
    rig.sh(f"echo 'rigforge_engine_up one' > {TEXTFILE}")
    took = wait_for(lambda: ("RigforgeTextfileUnreadable", "firing") in rig.notified(), 2 * INTERVAL_S + LOADED_S,
                    "the receiver gets RigforgeTextfileUnreadable")
    print(f"rigforge.prom unparseable: RigforgeTextfileUnreadable notified after {took:.0f} s")
    rig.sh("systemctl start rigforge-health-metrics.service rigforge-health-metrics.timer")
    wait_for(lambda: rig.value(f'node_textfile_scrape_error{{rig="{rig.host.name}"}}') == 0, LOADED_S,
             "the textfile parses again")


def test_the_engine_stopped_is_engine_down(rig: Rig) -> None:
    assert not rig.firing("RigforgeEngineDown")
    rig.sh(f"systemctl stop {UNIT_NAME}")
    took = wait_for(lambda: ("RigforgeEngineDown", "firing") in rig.notified(),
                    DOWN_FOR_S + 2 * INTERVAL_S + LOADED_S, "the receiver gets RigforgeEngineDown")
    print(f"engine stopped: RigforgeEngineDown notified after {took:.0f} s (engine_down_for_s {DOWN_FOR_S})")
    # Its /metrics down too, held back by the cause in Alertmanager.
    wait_for(lambda: any(alert["labels"]["alertname"] == "RigforgeEngineScrapeDown"
                         and alert["status"]["state"] == "suppressed" and alert["status"]["inhibitedBy"]
                         for alert in rig.manager_alerts()), LOADED_S, "engine scrape down inhibited")
    assert ("RigforgeEngineScrapeDown", "firing") not in rig.notified()
    cpu = rig.value("rigforge_health_metrics_cpu_seconds_total")
    writes = rig.value("rigforge_health_metrics_writes_total")
    exporter = rig.value('rate(process_cpu_seconds_total{job="rigforge-node"}[1m])')
    assert cpu is not None and writes
    per_write = cpu / writes
    print(f"collector: {cpu:.3f} CPU s over {writes:.0f} writes, {per_write * 1000:.0f} ms a write: "
          f"{per_write * 3600 / 30:.1f} CPU s an hour at the default interval_s 30; node_exporter (scraped every "
          f"2 s here): {(exporter or 0) * 3600:.1f} CPU s an hour")


def test_the_engine_scrape_sends_the_engines_key(rig: Rig, sandbox: Sandbox, tmp_path: Path) -> None:
    """engine.auth key: /metrics refuses a request without the key, and Prometheus' scrape (with its copy) answers."""
    keyed = sandbox.write_inventory(tmp_path / "keyed.py", [rig.host], "sandbox",
                                    {**rig.overrides, "engine": {"auth": {"mode": "key"}}})
    run_pyinfra(keyed, "deploys/serve.py")
    run_pyinfra(keyed, DEPLOY)
    refused = exec_in(rig.host, ["python3", "-c", "import urllib.request; urllib.request.urlopen("
                                 "'http://127.0.0.1:8080/metrics', timeout=10)"])
    assert refused.returncode != 0 and "401" in refused.stderr, refused.stderr
    copy = rig.sh("stat -c '%a %U %G' /etc/prometheus/rigforge/keys/" + rig.host.name).split()
    assert copy == ["640", "root", "prometheus"], copy
    engine_job = f'up{{job="rigforge-engine",rig="{rig.host.name}"}}'
    wait_for(lambda: rig.value(engine_job) == 1, 30, "Prometheus scrapes the keyed engine")


def test_monitoring_off_removes_the_timer_and_its_textfile(rig: Rig, sandbox: Sandbox, tmp_path: Path) -> None:
    """monitoring.enabled false: the timer, its service and rigforge.prom go (node_exporter would serve the last
    values, engine up 1 included, for ever)."""
    off = sandbox.write_inventory(tmp_path / "off.py", [rig.host], "sandbox",
                                  {**rig.overrides, "engine": {"auth": {"mode": "key"}},
                                   "monitoring": {**MONITORING, "enabled": False,
                                                  "prometheus": {**MONITORING["prometheus"], "install": False}}})
    run_pyinfra(off, DEPLOY)
    assert exec_in(rig.host, f"test -e {TEXTFILE}").returncode != 0
    assert exec_in(rig.host, "systemctl cat rigforge-health-metrics.timer").returncode != 0
