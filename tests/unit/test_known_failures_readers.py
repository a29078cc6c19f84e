"""The readers of the known failures: the log fact, the known-failures check, the bench and the doctor."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from rigforge.checks.capture import read_capture
from rigforge.checks.known_failures import check_known_failures, find_known_failures
from rigforge.checks.model import HostFacts
from rigforge.checks.table import table_lines
from rigforge.doctor import doctor_command, host_name, parse_records, render_table, verdict_status
from rigforge.facts.logs import (
    HEAD_LINES,
    NEEDLE_HEAD,
    TAIL_LINES,
    FailureLogs,
    KnownFailureLogs,
    failure_logs_command,
    parse_failure_logs,
)
from rigforge.profile.loader import load_profile
from roles.bench import known_failure_lines
from roles.doctor import hit_record

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "known-failures"

XID_79 = "2026-11-24T03:12:09+0000 rig2x-a kernel: NVRM: Xid (PCI:0000:41:00): 79, pid='<unknown>', " \
         "name=<unknown>, GPU has fallen off the bus."
XID_13 = "2026-11-24T03:12:01+0000 rig2x-a kernel: NVRM: Xid (PCI:0000:41:00): 13, pid=2210, name=python3, " \
         "Graphics SM Warp Exception"
#: A real harmless NVRM line (tests/fixtures/known-failures/gpu-machine/dmesg.txt) as the journal shows it.
NVRM_LOAD = "2026-11-24T03:11:00+0000 rig2x-a kernel: NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  " \
            "580.159.04  Release Build  (nixbld@)"
TILE = "2026-11-24T03:20:00+0000 rig2x-a docker[812]: Failed to initialize cutlass TMA WS grouped gemm"
PORT = "2026-11-24T03:21:00+0000 sandbox python[90]: 0.00.003.271 E srv         start: couldn't bind HTTP " \
       "server socket, hostname: 127.0.0.1, port: 8080"
#: A real line of the bench client (tests/fixtures/known-failures/bench-chat-template-chatml.txt) as the journal
#: shows it (short-iso, syslog identifier rigforge-bench).
LEAK = next(line for line in (FIXTURES / "bench-chat-template-chatml.txt").read_text().splitlines()
            if line.startswith("probe chat_capital: FAILED"))
BENCH_LEAK = f"2026-11-24T04:10:00+0000 sandbox rigforge-bench[2411]: {LEAK}"
PROFILE = load_profile("sandbox")


def test_the_fact_output_splits_into_kernel_engine_and_bench_lines() -> None:
    logs = parse_failure_logs(f"## kernel\n{XID_79}\n\n## engine\n{TILE}\n## bench\n{BENCH_LEAK}\n")
    assert logs == FailureLogs((XID_79,), (TILE,), (BENCH_LEAK,))
    assert parse_failure_logs("## kernel\n## engine\n## bench\n") == FailureLogs((), ())


def test_a_missing_section_names_the_fact() -> None:
    with pytest.raises(ValueError, match="KnownFailureLogs: no '## engine' section"):
        parse_failure_logs("## kernel\n")
    with pytest.raises(ValueError, match="KnownFailureLogs: no '## bench' section"):
        parse_failure_logs("## kernel\n## engine\n")


def test_the_command_filters_and_bounds_on_the_rig() -> None:
    """Run as sh runs it on a rig without journalctl or dmesg output: both sections, nothing else."""
    command = failure_logs_command("rigforge-engine.service", None, ["NVRM: Xid"], ["couldn't bind"])
    assert f"-v sh={NEEDLE_HEAD} " in command and f"-v eh={HEAD_LINES} -v et={TAIL_LINES}" in command
    assert "grep -aF -e 'NVRM: Xid'" in command
    assert "-b SYSLOG_IDENTIFIER=kernel" in command and '_SYSTEMD_INVOCATION_ID="$id"' in command
    assert "SYSLOG_IDENTIFIER=rigforge-bench" in command and "ActiveEnterTimestamp" in command
    window = failure_logs_command("u", "-2h", ["a"], ["b"], ["c"])
    assert "--since -2h SYSLOG_IDENTIFIER=kernel" in window and "-u u --since -2h" in window
    assert "--since -2h SYSLOG_IDENTIFIER=rigforge-bench 2>/dev/null | grep -aF -e c" in window
    run = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env={"PATH": "/nonexistent"},
                         check=False)
    assert parse_failure_logs(run.stdout) == FailureLogs((), ())


def test_a_since_that_is_not_a_time_is_refused() -> None:
    with pytest.raises(ValueError, match="not a journalctl time"):
        KnownFailureLogs().command(since="-2h; rm -rf /")


def test_one_row_per_known_failure_blocking_for_a_wedged_gpu() -> None:
    facts = _facts(FailureLogs((XID_13, XID_79), (TILE, PORT)))
    rows = check_known_failures(PROFILE, facts)
    assert [(row.name, row.verdict, row.blocking) for row in rows] == [
        ("known-failures", "fail", True), ("known-failures", "fail", False), ("known-failures", "warn", False),
        ("known-failures", "fail", False)]
    assert rows[0].found.startswith("xid-79-fallen-off-bus in the kernel log: 2026-11-24T03:12:09")
    assert "RESTART_BM" in rows[0].fix
    assert any("known-failures" in line and "fail (blocking)" in line for line in table_lines(rows))


def test_clean_logs_give_one_ok_row() -> None:
    rows = check_known_failures(PROFILE, _facts(FailureLogs((NVRM_LOAD,), ())))
    assert [(row.name, row.verdict) for row in rows] == [("known-failures", "ok")]


def test_a_failed_bench_names_what_its_window_shows() -> None:
    lines = known_failure_lines(FailureLogs((), (TILE,)), "2026-11-24 03:19:00 UTC")
    assert lines == ["bench: known failure moe-tile-fallback (warn): SM120 K=128 block-scaled MoE tiles overflow "
                     "shared memory at run time: MoE falls back to slow kernels; fix: build the engine image with "
                     "the K=64 FlashInfer patch (patches/flashinfer-0.6.6-sm120-k64.patch) (seen: " + TILE + ")"]
    assert known_failure_lines(FailureLogs((), ()), "T") == [
        "bench: no known failure in the engine journal, kernel log or bench lines since T"]


def test_the_bench_lines_name_a_served_template_that_is_not_the_models() -> None:
    rows = check_known_failures(PROFILE, _facts(FailureLogs((), (), (BENCH_LEAK,))))
    assert [(row.verdict, row.blocking) for row in rows] == [("fail", False)]
    assert rows[0].found.startswith("chat-template-not-the-models in the bench's journal lines: 2026-11-24T04:10")
    assert "engine.flags --chat-template" in rows[0].fix
    lines = known_failure_lines(FailureLogs((), (), (BENCH_LEAK,)), "T")
    assert lines[0].startswith("bench: known failure chat-template-not-the-models (fail): the engine applies a "
                               "chat template that is not the model's")


def test_the_doctor_table_has_a_row_per_hit_and_none_for_a_clean_rig() -> None:
    hits = [hit_record(hit) for hit in find_known_failures(FailureLogs((XID_79,), (PORT,), (BENCH_LEAK,)))]
    stdout = "\n".join([
        "noise from a deploy",
        "rigforge-doctor " + json.dumps({"host": "rig2x-a", "since": None, "hits": hits}),
        "rigforge-doctor " + json.dumps({"host": "rig2x-b", "since": None, "hits": []}),
    ])
    records = parse_records(stdout)
    table = render_table(["rig2x-a", "rig2x-b", "rig2x-c"], records).splitlines()
    assert table[2].startswith("| rig2x-a | kernel | xid-79-fallen-off-bus | blocking | 1 | `2026-11-24T03:12:09")
    assert table[3].startswith("| rig2x-a | engine | llama-port-in-use | fail | 1 |")
    assert table[4].startswith("| rig2x-a | bench | chat-template-not-the-models | fail | 1 |")
    assert table[5] == "| rig2x-b | kernel, engine, bench, driver | none | - | - | - | - |"
    assert table[6].startswith("| rig2x-c | - | not read")
    assert verdict_status(["rig2x-b"], records) == 0 and verdict_status(["rig2x-a"], records) == 1


def test_the_doctor_runs_pyinfra_with_the_window_and_plain_host_names() -> None:
    command = doctor_command("inventory/rig2x.py", "-2h", ["rig2x-a"])  # type: ignore[arg-type]
    assert command[-6:] == ["inventory/rig2x.py", "deploys/doctor.py", "--limit", "rig2x-a", "--data", "since=-2h"]
    assert host_name("@rigforge/rig2x-a") == "rig2x-a"


def _facts(logs: FailureLogs, tmp: Path = Path("/nonexistent")) -> HostFacts:
    """Every fact absent (as on a host without GPUs or tools), the logs given."""
    return replace(read_capture(tmp), failure_logs=logs)


def test_preflight_shows_unrecognised_error_lines_as_a_warn_row_and_the_doctor_fails() -> None:
    """A real error line no signature knows (https://github.com/pytorch/ao/issues/3788): preflight's row warns, the
    doctor exits 1; with a known failure of severity fail in the same log, that failure explains it."""
    unknown = ("RuntimeError: CUDA error: CUBLAS_STATUS_INVALID_VALUE when calling ::cublasLtMatmulDescSetAttribute("
               "descriptor(), attr, &value, sizeof(value))")
    rows = check_known_failures(PROFILE, _facts(FailureLogs((), (unknown,))))
    assert [(row.verdict, row.blocking) for row in rows] == [("warn", False)]
    assert rows[0].found == f"unrecognised error lines in the engine journal (1), first: {unknown}"
    record = {"host": "rig2x-a", "hits": [hit_record(hit) for hit in find_known_failures(FailureLogs((), (unknown,)))]}
    assert verdict_status(["rig2x-a"], {"rig2x-a": record}) == 1
    assert [hit.id for hit in find_known_failures(FailureLogs((), (PORT, unknown)))] == ["llama-port-in-use"]
