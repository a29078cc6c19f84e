"""The health-metrics collector that runs on the rig (rigforge/remote/health_metrics.py, gpu_health.py), its config
from the profile (rigforge/monitoring/collector.py) and the monitoring settings' checks.

GPU values are parsed from real ``nvidia-smi --query-gpu --format=csv`` captures of lent H200 machines
(tests/fixtures/gpu/, see its README): no RTX PRO 6000 was there to capture. The collector's own query, its
parts under a hung and a failing nvidia-smi and its GPU error counters are in test_collector_parts.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rigforge.checks.tradeoffs import tradeoff_lines
from rigforge.known_failures import match, signature_data
from rigforge.monitoring import prometheus
from rigforge.monitoring.collector import collector_config, primary_bench
from rigforge.profile.loader import ProfileError, load_profile
from rigforge.remote import gpu_health, health_metrics, journal_health
from roles.monitoring import render_units

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
H200_QUERY = FIXTURES / "gpu" / "nvidia-h200-x2" / "nvidia-smi-query-gpu.csv"
H200_GPU0 = {"gpu": "0", "uuid": "", "pci_bus_id": "0000:00:06.0"}  # that older capture asked for no uuid
H200_GPU1 = {"gpu": "1", "uuid": "", "pci_bus_id": "0000:00:07.0"}
BENCH_RESULT = Path(__file__).resolve().parents[1] / "bench_support" / "captures" / "result_gemma_sandbox.json"
XID_79 = "NVRM: Xid (PCI:0000:41:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def by_name(samples: list, name: str) -> list:
    return [(labels, value) for metric, labels, value in samples if metric == name]


def test_the_h200_capture_gives_each_gpu_beside_the_profile() -> None:
    expected = {"count": 2, "model": "RTX PRO 6000 Blackwell", "pcie_gen": 5, "pcie_width": 16,
                "persistence_mode": True, "power_limit_w": 600}
    samples = gpu_health.gpu_samples(expected, gpu_health.Query(H200_QUERY.read_text(), None, 0))
    assert by_name(samples, "rigforge_gpus_found") == [({}, 2.0)]
    assert by_name(samples, "rigforge_gpus_expected") == [({}, 2.0)]
    assert by_name(samples, "rigforge_gpu_pcie_link_gen_max") == [(H200_GPU0, 5.0), (H200_GPU1, 5.0)]
    assert by_name(samples, "rigforge_gpu_pcie_link_width_current") == [(H200_GPU0, 16.0), (H200_GPU1, 16.0)]
    assert by_name(samples, "rigforge_gpu_power_limit_watts")[0] == (H200_GPU0, 700.0)
    assert by_name(samples, "rigforge_gpu_power_limit_expected_watts")[0] == (H200_GPU0, 600.0)
    assert by_name(samples, "rigforge_gpu_persistence_mode")[1] == (H200_GPU1, 1.0)
    # An H200 is not the profile's card: said, not hidden.
    assert by_name(samples, "rigforge_gpu_model_as_expected") == [(H200_GPU0, 0.0), (H200_GPU1, 0.0)]
    info = by_name(samples, "rigforge_gpu_info")[0][0]
    assert (info["name"], info["pci_bus_id"]) == ("NVIDIA H200", "0000:00:06.0")  # sysfs' form of 00000000:00:06.0
    # The capture's query has no temperature or ECC column: no such series, never a made-up 0.
    assert not by_name(samples, "rigforge_gpu_temperature_celsius")


def test_not_available_values_are_left_out() -> None:
    # Hand-written: the RTX PRO 6000's layout of the fields it leaves [N/A] (no such card was there to capture).
    text = ("index, name, temperature.gpu, retired_pages.pending, ecc.errors.uncorrected.volatile.total\n"
            "0, NVIDIA RTX PRO 6000 Blackwell, 41, [N/A], [N/A]\n")
    samples = gpu_health.gpu_samples(None, gpu_health.Query(text, None, 0))
    assert by_name(samples, "rigforge_gpu_temperature_celsius") == [({"gpu": "0", "uuid": "", "pci_bus_id": ""}, 41.0)]
    assert not by_name(samples, "rigforge_gpu_retired_pages_pending")
    assert not by_name(samples, "rigforge_gpu_ecc_errors_total")


def test_a_cpu_only_rig_says_zero_gpus_and_no_nvidia_smi() -> None:
    samples = gpu_health.gpu_samples(None, gpu_health.Query(None, None))
    assert {name for name, _, _ in samples} == {"rigforge_gpus_expected", "rigforge_gpus_found",
                                                "rigforge_nvidia_smi_present", "rigforge_nvidia_smi_ok"}
    assert by_name(samples, "rigforge_gpus_found") == [({}, 0.0)]
    assert by_name(samples, "rigforge_nvidia_smi_present") == [({}, 0.0)]


def test_the_query_names_documented_fields_and_the_csv_header() -> None:
    argv = gpu_health.query_argv()
    assert argv[0] == "nvidia-smi" and argv[-1] == "--format=csv"
    # The columns the real capture shows keep their names.
    header = H200_QUERY.read_text().splitlines()[0]
    captured = {column.strip().split(" [")[0] for column in header.split(",")}
    assert {"index", "name", "pci.bus_id", "persistence_mode", "power.limit", "pcie.link.gen.max",
            "pcie.link.width.current"} <= captured & set(gpu_health.QUERY_FIELDS)


def test_a_driver_update_without_reboot_is_pending(tmp_path: Path) -> None:
    module = tmp_path / "version"
    module.write_text("580.95.05\n")
    lib = tmp_path / "x86_64-linux-gnu"
    lib.mkdir()
    (lib / "libnvidia-ml.so.595.45.04").write_text("")
    pending = gpu_health.driver_samples(None, str(module), str(tmp_path / "*" / "libnvidia-ml.so.*.*"))
    assert ("rigforge_driver_reboot_pending", {}, 1.0) in pending
    assert ("rigforge_nvidia_driver_info", {"loaded": "580.95.05", "installed": "595.45.04"}, 1.0) in pending
    module.write_text("595.45.04\n")
    same = gpu_health.driver_samples(None, str(module), str(tmp_path / "*" / "libnvidia-ml.so.*.*"))
    assert ("rigforge_driver_reboot_pending", {}, 0.0) in same
    none = gpu_health.driver_samples(None, str(tmp_path / "absent"), str(tmp_path / "none" / "*"))
    assert none == [("rigforge_nvidia_driver_present", {}, 0.0)]


def test_the_journal_is_one_read_after_the_cursor() -> None:
    argv = journal_health.journal_argv("rigforge-engine.service", "rigforge-bench", "s=abc")
    assert argv[:2] == ["journalctl", "-b"] and "--after-cursor=s=abc" in argv
    assert argv[-5:] == ["_SYSTEMD_UNIT=rigforge-engine.service", "+", "SYSLOG_IDENTIFIER=kernel", "+",
                         "SYSLOG_IDENTIFIER=rigforge-bench"]
    assert not [word for word in journal_health.journal_argv("u", "b", None) if word.startswith("--after-cursor")]


def test_journal_lines_are_sorted_by_log_and_counted_per_signature() -> None:
    missing = next(s for s in signature_data() if s["id"] == "llama-model-file-missing")["examples"][0]
    entries = [{"__CURSOR": "c1", "SYSLOG_IDENTIFIER": "kernel", "MESSAGE": XID_79},
               {"__CURSOR": "c2", "SYSLOG_IDENTIFIER": "llama", "MESSAGE": missing},
               {"__CURSOR": "c3", "SYSLOG_IDENTIFIER": "kernel", "MESSAGE": list(XID_79.encode())},
               {"__CURSOR": "c4", "SYSLOG_IDENTIFIER": "llama", "MESSAGE": "srv  log_server_r: request: GET /health"}]
    text = "\n".join(json.dumps(entry) for entry in entries) + "\nnot json\n"
    logs, cursor, kernel = journal_health.parse_journal(text, "rigforge-bench")
    assert cursor == "c4" and [message for message, _ in kernel] == [XID_79, XID_79]
    assert logs["kernel"] == [XID_79, XID_79] and len(logs["engine"]) == 2 and logs["bench"] == []
    counts = journal_health.count_known_failures(match, signature_data(), logs)
    assert counts == {"xid-79-fallen-off-bus": 2, "llama-model-file-missing": 1}
    samples = journal_health.known_failure_samples(signature_data(), {"xid-79-fallen-off-bus": 5})
    total = dict((labels["id"], value) for labels, value in by_name(samples, "rigforge_known_failure_lines_total"))
    assert total["xid-79-fallen-off-bus"] == 5 and total["llama-model-file-missing"] == 0
    assert len(total) == len(signature_data())  # every signature, 0 included: the rise from 0 is seen


def test_state_starts_afresh_on_a_new_boot(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"boot_id": "a", "cursor": "c", "lines": {"x": 1}, "cpu_seconds": 2.0}))
    assert health_metrics.read_state(str(path), "a")["cursor"] == "c"
    fresh = {"boot_id": "b", "cursor": None, "lines": {}, "xids": {}, "replays": None, "cpu_seconds": 0.0,
             "writes": 0}
    assert health_metrics.read_state(str(path), "b") == fresh
    assert health_metrics.read_state(str(tmp_path / "absent.json"), "a")["lines"] == {}


def test_the_last_bench_primary_metric_and_its_floor() -> None:
    bench = {"latest": str(BENCH_RESULT), "metric": "decode_tps_per_user", "key": "decode_tps_per_user",
             "stat": "median", "concurrency": 1, "input_tokens": 48, "floor": 0.05}
    samples = health_metrics.bench_samples(bench)
    labels = {"metric": "decode_tps_per_user", "concurrency": "1", "input_tokens": "48"}
    assert by_name(samples, "rigforge_bench_primary_value") == [(labels, 31.927)]
    assert by_name(samples, "rigforge_bench_primary_floor") == [(labels, 0.05)]
    assert by_name(samples, "rigforge_bench_timestamp_seconds")[0][1] > 1.7e9
    assert health_metrics.bench_samples({**bench, "latest": "/nonexistent"}) == [("rigforge_bench_present", {}, 0.0)]


def test_exposition_escapes_labels_and_types_counters(tmp_path: Path) -> None:
    labels = {"id": 'a"b\\c', "failure_severity": "warn"}
    text = health_metrics.exposition([("rigforge_known_failure_lines_total", labels, 2.0),
                                      ("rigforge_gpus_found", {}, 0.0)])
    assert '# TYPE rigforge_known_failure_lines_total counter' in text
    assert 'rigforge_known_failure_lines_total{id="a\\"b\\\\c",failure_severity="warn"} 2' in text
    target = tmp_path / "rigforge.prom"
    health_metrics.write_atomically(str(target), text)
    assert target.read_text() == text and oct(target.stat().st_mode)[-3:] == "644"
    assert [path.name for path in tmp_path.iterdir()] == ["rigforge.prom"]  # no temp file left


def test_the_collector_config_from_profiles() -> None:
    sandbox = collector_config(load_profile("sandbox"))
    assert sandbox["gpus"] is None and sandbox["disks"] == {"weights": "/srv/models/gemma-3-270m"}
    assert sandbox["bench"]["floor"] == 0.05 and sandbox["textfile"].endswith("/node-exporter/rigforge.prom")
    rig = collector_config(load_profile("2x-pix"))
    assert rig["gpus"]["count"] == 2 and rig["gpus"]["pcie_gen"] == 5
    assert "images-and-jit-caches" in rig["disks"]
    assert primary_bench(load_profile("4x-threadripper"))["concurrency"] == 8
    json.dumps(rig)  # plain data for the rig's JSON file
    assert set(health_metrics.HELP) >= {"rigforge_gpus_found", "rigforge_engine_up"}


def test_a_window_shorter_than_two_samples_is_refused() -> None:
    with pytest.raises(ProfileError, match="known_failure_window_s.*at least 60 s"):
        load_profile("sandbox", {"monitoring": {"alerts": {"known_failure_window_s": 30}}})


def test_metrics_beyond_loopback_are_a_trade_off_line() -> None:
    assert not [line for line in tradeoff_lines(load_profile("sandbox")) if "monitoring" in line]
    exposed = load_profile("sandbox", {"monitoring": {"node_exporter": {"listen_host": "0.0.0.0"}}})
    lines = [line for line in tradeoff_lines(exposed) if "monitoring" in line]
    assert len(lines) == 1 and "0.0.0.0:9100 answers every network" in lines[0]
    assert "monitoring.node_exporter.listen_host: 127.0.0.1" in lines[0]


def test_units_and_drop_ins_as_rendered() -> None:
    profile = load_profile("sandbox", {"monitoring": {"interval_s": 15}})
    units = render_units(profile)
    timer = units["/etc/systemd/system/rigforge-health-metrics.timer"]
    assert "OnUnitActiveSec=15s" in timer and "AccuracySec=1s" in timer
    service = units["/etc/systemd/system/rigforge-health-metrics.service"]
    assert "ExecStart=/usr/bin/python3 /opt/rigforge/lib/monitoring/health_metrics.py " \
           "/etc/rigforge/monitoring/collector.json" in service
    # A run is killed past its start timeout, which covers the longest part's bound (the parts run at once).
    timeout = int(service.split("TimeoutStartSec=")[1].split("s")[0])
    assert timeout > max(health_metrics.PART_TIMEOUTS_S.values()) and timeout < 3 * 60
    dropin = prometheus.render_exporter_dropin(profile)
    assert "--web.listen-address=127.0.0.1:9100" in dropin and "ExecStart=\n" in dropin
    assert "--web.listen-address=127.0.0.1:9090" in prometheus.render_prometheus_dropin(profile)


def test_scrape_targets_where_they_can_be_reached() -> None:
    sandbox = load_profile("sandbox")
    same = prometheus.scrape_target("rig1", sandbox, "rig1.lan", same_host=True)
    assert same == prometheus.ScrapeTarget("rig1", "127.0.0.1:9100", "127.0.0.1:8080")
    assert prometheus.scrape_target("rig1", sandbox, "rig1.lan", same_host=False) is None  # loopback, another machine
    exposed = load_profile("sandbox", {"monitoring": {"node_exporter": {"listen_host": "0.0.0.0"}},
                                       "engine": {"host": "0.0.0.0"}})
    remote = prometheus.scrape_target("rig1", exposed, "rig1.lan", same_host=False)
    assert remote is not None and remote.node == "rig1.lan:9100" and remote.engine == "rig1.lan:8080"
    assert remote.key_file == "/etc/prometheus/rigforge/keys/rig1"  # beyond loopback the engine asks for its key
    no_metrics = load_profile("sandbox", {"engine": {"flags": {"--metrics": False}}})
    assert prometheus.scrape_target("rig1", no_metrics, "rig1", same_host=True).engine is None
    assert prometheus.serves_metrics(load_profile("2x-pix")) == (load_profile("2x-pix").engine.kind == "vllm"
                                                      or load_profile("2x-pix").engine.flags.get("--enable-metrics")
                                                      is True)
    config = prometheus.render_prometheus_config(sandbox, [same], "rig1")
    assert 'files: ["/etc/prometheus/rigforge/targets/rig1-node.yml"]' in config \
        and "rule_files:\n  - /etc/prometheus/rigforge/rigforge-alerts.yml" in config
    assert prometheus.target_files(same)["rig1-node.yml"] == '- targets: ["127.0.0.1:9100"]\n  labels: {rig: "rig1"}\n'
