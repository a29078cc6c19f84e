"""The collector's parts: bounded and independent, nvidia-smi's exit statuses, and the target cards' GPU coverage.

Real: tests/fixtures/gpu/nvidia-h200-x1-collector/ (its README entry says where and when): the collector's own
query and its whole run on a lent H200, idle and under load. Stand-ins, each labelled where it is made: small
``nvidia-smi``/``journalctl``/``systemctl`` programs on PATH (a hung one, failing ones replaying real or
documented output), a FIFO no one writes (a read that never returns, as of a hung mount) and a sysfs tree of
AER files in the kernel's documented layout (the lent VM exposes none).
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rigforge.known_failures import match, signature_data
from rigforge.remote import bounded, gpu_errors, gpu_health, health_metrics

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "monitoring" / "nvidia-h200-x1-collector"
H200 = {"gpu": "0", "uuid": "GPU-4b0cdff0-4fa4-41e6-0f14-21ba657ef46f", "pci_bus_id": "0000:00:06.0"}
XID_79 = "NVRM: Xid (PCI:0000:41:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
#: Stand-in for nvidia-smi (not NVIDIA's program): STANDIN=hang sleeps far past any bound; STANDIN=replay prints
#: STANDIN_STDOUT's file and exits STANDIN_RC; STANDIN_REFUSE names a field it refuses as the real one does.
NVIDIA_SMI_STANDIN = """#!/usr/bin/env python3
import os, sys, time
refuse = os.environ.get("STANDIN_REFUSE")
if refuse and refuse in " ".join(sys.argv):
    print(f'Field "{refuse}" is not a valid field to query.'); print(); sys.exit(2)
if os.environ.get("STANDIN") == "hang":
    time.sleep(600)
sys.stdout.write(open(os.environ["STANDIN_STDOUT"]).read())
sys.exit(int(os.environ.get("STANDIN_RC", "0")))
"""


def values(samples: list, name: str) -> list:
    return [(labels, value) for metric, labels, value in samples if metric == name]


def standin(tmp_path: Path, name: str, text: str) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return folder


@pytest.fixture
def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setenv("PATH", f"{standin(tmp_path, 'nvidia-smi', NVIDIA_SMI_STANDIN)}:{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_STDOUT", str(CAPTURE / "collector-query-load.csv"))
    return monkeypatch


def manifest() -> dict[str, tuple[int, str]]:
    rows = [line.split("\t") for line in (CAPTURE / "manifest.tsv").read_text().splitlines()[1:]]
    return {row[0]: (int(row[1]), row[3]) for row in rows}


def test_the_real_driver_took_every_field_of_the_collectors_query() -> None:
    ran = manifest()
    assert ran["collector-query-load.csv"] == (0, " ".join(gpu_health.query_argv()))
    assert all(ran[f"field-{field}.csv"][0] == 0 for field in gpu_health.QUERY_FIELDS)
    header = (CAPTURE / "collector-query-load.csv").read_text().splitlines()[0]
    assert [re.sub(r" \[.*\]$", "", column.strip()) for column in header.split(",")] == list(gpu_health.QUERY_FIELDS)
    # What the driver's own help documents: each field is named there.
    documented = (CAPTURE / "nvidia-smi-help-query-gpu.txt").read_text()
    assert all(f'"{field}"' in documented for field in gpu_health.QUERY_FIELDS)


def test_the_real_h200_under_load_and_idle() -> None:
    load = gpu_health.gpu_samples({"count": 1}, gpu_health.Query((CAPTURE / "collector-query-load.csv").read_text(),
                                                                 None, 0))
    assert values(load, "rigforge_gpus_found") == [({}, 1.0)] and values(load, "rigforge_nvidia_smi_ok") == [({}, 1.0)]
    # What the H200 reports instead of retired pages ([N/A], left out): row remapping.
    assert not values(load, "rigforge_gpu_retired_pages_pending")
    assert values(load, "rigforge_gpu_remapped_rows_pending") == [(H200, 0.0)]
    assert values(load, "rigforge_gpu_remapped_rows_failure") == [(H200, 0.0)]
    assert [labels["cause"] for labels, _ in values(load, "rigforge_gpu_remapped_rows_total")] == \
        ["correctable", "uncorrectable"]
    active = {labels["reason"]: value for labels, value in values(load, "rigforge_gpu_clocks_event_reason_active")}
    assert active["sw_power_cap"] == 1.0 and active["gpu_idle"] == 0.0  # 692.03 W of 700 W: the power cap holds
    assert values(load, "rigforge_gpu_clock_hertz")[0] == ({**H200, "clock": "sm"}, 1425e6)
    assert values(load, "rigforge_gpu_utilization_ratio") == [(H200, 1.0)]
    assert values(load, "rigforge_gpu_memory_used_bytes") == [(H200, 883 * 2**20)]
    assert values(load, "rigforge_gpu_temperature_margin_celsius") == [(H200, 11.0)]
    seconds = {labels["reason"]: value for labels, value in values(load, "rigforge_gpu_clocks_event_seconds_total")}
    assert seconds["sw_power_cap"] == pytest.approx(11.568592)
    idle = gpu_health.gpu_samples(None, gpu_health.Query((CAPTURE / "collector-query-idle.csv").read_text(), None, 0))
    assert ({**H200, "reason": "gpu_idle"}, 1.0) in values(idle, "rigforge_gpu_clocks_event_reason_active")
    assert values(idle, "rigforge_gpu_clock_hertz")[0][1] == 345e6


def test_the_collectors_whole_run_on_the_h200_labels_every_gpu_series() -> None:
    text = (CAPTURE / "collector-run-load.prom").read_text()
    series = [line for line in text.splitlines() if line.startswith("rigforge_gpu_")]
    assert len(series) > 40
    assert all(f'uuid="{H200["uuid"]}"' in line and 'pci_bus_id="0000:00:06.0"' in line for line in series)
    assert 'rigforge_gpu_pcie_replays_total{pci_bus_id="0000:00:06.0",uuid="GPU-4b0cdff0' in text
    assert 'rigforge_health_metrics_part_ok{part="gpu"} 1' in text
    # That VM has no journalctl or systemctl (PID 1 is its own process_api): those parts say so, the rest is written.
    assert 'rigforge_health_metrics_part_ok{part="journal"} 0' in text
    assert "rigforge_gpu_pcie_aer_errors_total" not in text and (CAPTURE / "sys-pci-aer.txt").read_text() == ""
    assert set(re.findall(r"^# TYPE (\S+)", text, re.MULTILINE)) <= set(health_metrics.HELP)


def test_exit_14_keeps_the_values_and_says_the_inforom_is_corrupt(smi: pytest.MonkeyPatch) -> None:
    smi.setenv("STANDIN_RC", "14")  # the real H200 output with the status a corrupted infoROM gives (planted)
    query = gpu_health.run_query(10)
    samples = gpu_health.gpu_samples({"count": 1}, query)
    assert (query.exit_code, values(samples, "rigforge_gpus_found")) == (14, [({}, 1.0)])
    assert values(samples, "rigforge_nvidia_smi_ok") == [({}, 1.0)]
    assert values(samples, "rigforge_nvidia_smi_inforom_valid") == [({}, 0.0)]
    assert "infoROM is corrupted" in (query.error or "")


def test_failing_statuses_are_told_apart(smi: pytest.MonkeyPatch, tmp_path: Path) -> None:
    smi.setenv("STANDIN_STDOUT", str(CAPTURE / "failing-no-such-gpu.csv"))  # real: nvidia-smi -i 7 on one GPU
    smi.setenv("STANDIN_RC", str(manifest()["failing-no-such-gpu.csv"][0]))
    query = gpu_health.run_query(10)
    assert (query.exit_code, query.output) == (6, None)
    assert query.error == "nvidia-smi exited 6 (a query to find an object was unsuccessful): No devices were found"
    samples = gpu_health.gpu_samples({"count": 2}, query)
    assert values(samples, "rigforge_gpus_found") == [({}, 0.0)]
    assert not values(samples, "rigforge_nvidia_smi_inforom_valid")
    # Hand-written: a GPU gone from the bus (exit 15) while another answers; the one that answers is counted.
    lost = tmp_path / "lost.csv"
    rows = (CAPTURE / "collector-query-load.csv").read_text().splitlines()
    lost.write_text("\n".join([*rows, "Unable to determine the device handle for GPU0000:41:00.0: Unknown Error"]))
    smi.setenv("STANDIN_STDOUT", str(lost))
    smi.setenv("STANDIN_RC", "15")
    samples = gpu_health.gpu_samples({"count": 2}, gpu_health.run_query(10))
    assert values(samples, "rigforge_gpus_found") == [({}, 1.0)]
    assert values(samples, "rigforge_nvidia_smi_ok") == [({}, 0.0)]
    assert values(samples, "rigforge_nvidia_smi_exit_code") == [({}, 15.0)]


def test_a_field_an_older_driver_refuses_is_dropped(smi: pytest.MonkeyPatch) -> None:
    smi.setenv("STANDIN_REFUSE", "temperature.gpu.tlimit")  # as the real driver refuses an unknown field
    query = gpu_health.run_query(10)
    assert query.refused == ("temperature.gpu.tlimit",) and query.exit_code == 0
    assert (manifest()["failing-unknown-field.csv"][0],
            (CAPTURE / "failing-unknown-field.csv").read_text().strip()) == (
        2, 'Field "no.such.field" is not a valid field to query.')


def test_a_hung_nvidia_smi_is_cut_at_its_bound(smi: pytest.MonkeyPatch) -> None:
    smi.setenv("STANDIN", "hang")
    started = time.monotonic()
    query = gpu_health.run_query(1)
    assert query.output is None and query.error == "nvidia-smi did not answer within 1 s"
    assert time.monotonic() - started < 300  # the stand-in sleeps 600 s: it was not waited for


def collector_config_for(tmp_path: Path, **overrides: object) -> dict:
    """A collector.json for a run in ``tmp_path`` (the project's matcher and signatures, a 2-GPU profile's count)."""
    config = {"interval_s": 30, "textfile": str(tmp_path / "rigforge.prom"), "state": str(tmp_path / "state.json"),
              "matcher_dir": str(Path(match.__file__).parent), "matcher_module": "match",
              "signatures": signature_data(), "bench_ident": "rigforge-bench",
              "engine": {"unit": "rigforge-engine.service", "health_url": "http://127.0.0.1:9/health",
                         "health_timeout_s": 600},
              "gpus": {"count": 2}, "disks": {"weights": str(tmp_path)},
              "bench": {"latest": str(overrides.pop("latest", tmp_path / "none.json")), "metric": "m", "key": "k",
                        "stat": "median", "concurrency": 1, "input_tokens": 1, "floor": None}}
    return {**config, **overrides}


def test_a_hung_nvidia_smi_blocks_neither_the_journal_nor_the_engine(smi: pytest.MonkeyPatch, tmp_path: Path) -> None:
    smi.setenv("STANDIN", "hang")
    # Stand-ins: journalctl printing one kernel Xid 79 line as JSON, systemctl an active engine unit.
    entry = {"__CURSOR": "s=1", "__REALTIME_TIMESTAMP": "1796170000000000", "SYSLOG_IDENTIFIER": "kernel",
             "MESSAGE": XID_79}
    (tmp_path / "journal.json").write_text(json.dumps(entry) + "\n")
    standin(tmp_path, "journalctl", f"#!/bin/sh\ncat {tmp_path / 'journal.json'}\n")
    standin(tmp_path, "systemctl", "#!/bin/sh\nprintf 'ActiveState=active\\nNRestarts=0\\n'\n")
    fifo = tmp_path / "latest.json"  # a bench result no one ever writes: its read never returns (a hung mount)
    os.mkfifo(fifo)
    config = collector_config_for(tmp_path, latest=str(fifo), timeouts_s={"gpu": 3, "bench": 2})
    (tmp_path / "c.json").write_text(json.dumps(config))
    started = time.monotonic()
    try:
        assert health_metrics.main([str(tmp_path / "c.json")]) == 0
    finally:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # lets the stuck reader go
    assert time.monotonic() - started < 300
    text = (tmp_path / "rigforge.prom").read_text()
    part = "rigforge_health_metrics_part"
    for line in (f'{part}_timed_out{{part="gpu"}} 1', f'{part}_ok{{part="gpu"}} 0',
                 f'{part}_timed_out{{part="bench"}} 1', f'{part}_ok{{part="journal"}} 1',
                 f'{part}_ok{{part="engine"}} 1', "rigforge_engine_unit_active 1",
                 "rigforge_gpus_found 0", "rigforge_nvidia_smi_ok 0",
                 'rigforge_known_failure_lines_total{id="xid-79-fallen-off-bus",failure_severity="blocking"} 1',
                 'rigforge_gpu_xid_errors_total{xid="79",pci_bus_id="0000:41:00.0",uuid=""} 1',
                 'rigforge_gpu_xid_last_timestamp_seconds{xid="79",pci_bus_id="0000:41:00.0",uuid=""} 1796170000'):
        assert line in text, line
    assert "rigforge_nvidia_smi_exit_code" not in text
    assert json.loads((tmp_path / "state.json").read_text())["cursor"] == "s=1"


def test_a_hung_journal_keeps_its_cursor_and_the_last_counts(smi: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Stand-ins: journalctl that never answers, systemctl an active unit; nvidia-smi replays the real H200 query.
    standin(tmp_path, "journalctl", "#!/bin/sh\nexec sleep 600\n")
    standin(tmp_path, "systemctl", "#!/bin/sh\nprintf 'ActiveState=active\\n'\n")
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    (tmp_path / "state.json").write_text(json.dumps({"boot_id": boot, "cursor": "s=0", "writes": 4,
                                                     "lines": {"xid-79-fallen-off-bus": 3},
                                                     "xids": {"0000:41:00.0|79": [3, 1796170000.0]},
                                                     # the UUID the driver gave before it let go of the GPU
                                                     "uuids": {"0000:41:00.0": "GPU-gone"}}))
    (tmp_path / "c.json").write_text(json.dumps(collector_config_for(tmp_path, timeouts_s={"journal": 2})))
    assert health_metrics.main([str(tmp_path / "c.json")]) == 0
    text = (tmp_path / "rigforge.prom").read_text()
    for line in ('rigforge_health_metrics_part_timed_out{part="journal"} 1',
                 'rigforge_health_metrics_part_ok{part="gpu"} 1', "rigforge_gpus_found 1",
                 'rigforge_gpu_xid_errors_total{xid="79",pci_bus_id="0000:41:00.0",uuid="GPU-gone"} 3',
                 'rigforge_known_failure_lines_total{id="xid-79-fallen-off-bus",failure_severity="blocking"} 3'):
        assert line in text, line
    state = json.loads((tmp_path / "state.json").read_text())
    assert (state["cursor"], state["writes"]) == ("s=0", 5)


def test_a_part_that_raises_costs_only_its_own_samples() -> None:
    def broken() -> list:
        raise OSError("disk gone")
    results = bounded.run_parts({"ok": (lambda: [1], 5), "broken": (broken, 5)})
    assert results["ok"].value == [1] and results["ok"].error is None
    assert results["broken"].error == "OSError: disk gone" and not results["broken"].timed_out


def test_xids_per_gpu_and_code_with_the_drivers_uuids(tmp_path: Path) -> None:
    # The real /proc/driver/nvidia/gpus/*/information of the 2x H200 capture, laid out again as files.
    real = (CAPTURE.parents[1] / "gpu" / "nvidia-h200-x2" / "proc-driver-nvidia-gpus-information.txt").read_text()
    for line in real.splitlines():
        folder, text = line.split("/information:", 1)
        path = f"{folder}/information"
        target = tmp_path / Path(path).relative_to("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a") as handle:
            handle.write(text + "\n")
    uuids = gpu_errors.gpu_uuids(str(tmp_path / "proc/driver/nvidia/gpus/*/information"))
    assert uuids == {"0000:00:06.0": "GPU-c8d68b72-297d-5733-820a-6238e4142d3b",
                     "0000:00:07.0": "GPU-f658f61d-5600-c93e-3897-cdf2260be4f1"}
    counts: dict = {}
    gpu_errors.count_xids([("NVRM: Xid (PCI:0000:00:06): 13, Graphics SM Warp Exception", 10.0),
                           ("NVRM: Xid (0000:00:06): 13, older drivers print no PCI:", 20.0),
                           ("NVRM: Xid (PCI:0000:00:07): 94, Contained ECC error", 5.0), ("unrelated", 1.0)], counts)
    samples = gpu_errors.xid_samples(counts, uuids)
    assert values(samples, "rigforge_gpu_xid_errors_total") == [
        ({"xid": "13", "pci_bus_id": "0000:00:06.0", "uuid": uuids["0000:00:06.0"]}, 2.0),
        ({"xid": "94", "pci_bus_id": "0000:00:07.0", "uuid": uuids["0000:00:07.0"]}, 1.0)]
    assert values(samples, "rigforge_gpu_xid_last_timestamp_seconds")[0][1] == 20.0


def test_replays_from_the_real_report_and_aer_where_sysfs_has_it(tmp_path: Path) -> None:
    assert gpu_errors.parse_replays((CAPTURE / "nvidia-smi-q-idle.txt").read_text()) == {
        "0000:00:06.0": {"replays": 0.0, "rollovers": 0.0}}
    # Stand-in sysfs: a GPU behind a bridge, AER files in the kernel's layout (sysfs-bus-pci-devices-aer_stats).
    bridge = tmp_path / "devices" / "pci0000:00" / "0000:00:01.1"
    gpu = bridge / "0000:41:00.0"
    gpu.mkdir(parents=True)
    (gpu / "aer_dev_correctable").write_text("RxErr 3\nBadTLP 2\nBadDLLP 0\nTOTAL_ERR_COR 5\n")
    (gpu / "aer_dev_fatal").write_text("Undefined 0\nTOTAL_ERR_FATAL 0\n")
    (bridge / "aer_dev_correctable").write_text("RxErr 7\nTOTAL_ERR_COR 7\n")
    (tmp_path / "bus").mkdir()
    (tmp_path / "bus" / "0000:41:00.0").symlink_to(gpu)
    samples = gpu_errors.aer_samples({"0000:41:00.0": "GPU-x"}, str(tmp_path / "bus"))
    assert values(samples, "rigforge_gpu_pcie_aer_errors_total") == [
        ({"pci_bus_id": "0000:41:00.0", "uuid": "GPU-x", "link_end": "gpu", "aer_severity": "correctable"}, 5.0),
        ({"pci_bus_id": "0000:41:00.0", "uuid": "GPU-x", "link_end": "gpu", "aer_severity": "fatal"}, 0.0),
        ({"pci_bus_id": "0000:41:00.0", "uuid": "GPU-x", "link_end": "upstream", "aer_severity": "correctable"}, 7.0)]


def test_the_installed_modules_run_on_their_own(tmp_path: Path) -> None:
    """The files as the role installs them, run by a python3 that has no rigforge (the rig's layout)."""
    from rigforge.monitoring.collector import COLLECTOR_DIR, COLLECTOR_FILES, collector_config
    from rigforge.profile.loader import load_profile
    from roles.monitoring import render_collector_file

    profile = load_profile("sandbox")
    for remote in COLLECTOR_FILES:
        (tmp_path / Path(remote).name).write_text(render_collector_file(profile, remote))
    config = {**collector_config(profile), "matcher_dir": str(tmp_path), "textfile": str(tmp_path / "out.prom"),
              "state": str(tmp_path / "state" / "state.json")}
    (tmp_path / "c.json").write_text(json.dumps(config))
    run = subprocess.run([sys.executable, "-S", "-E", str(tmp_path / "health_metrics.py"), str(tmp_path / "c.json")],
                         cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120)
    assert run.returncode == 0, run.stderr
    text = (tmp_path / "out.prom").read_text()
    assert "rigforge_gpus_expected 0" in text and 'rigforge_health_metrics_part_ok{part="disks"} 1' in text
    assert all(Path(remote).parent == Path(COLLECTOR_DIR) for remote in COLLECTOR_FILES)
