"""Bench comparison on real measured numbers: the real bench client against a real llama.cpp server
(xllamacpp) serving Gemma 3 270M on 127.0.0.1, two runs with repeats, kept as ``results/<host>/<stamp>/``.

What is real: every number (two bench runs, each cell measured 3 times). What is derived, and why: to
show each verdict deterministically on a shared 2-core box, the "after" of some tests is the real "before"
with every repeat scaled by a factor chosen from the *measured* spread (scaling keeps the spread), so
"worse (regression)" and "cannot tell" are reached by construction, not by hoping the box slows down. The real
driver slowdown (a throttled container) is the rollout e2e test's job. No test asserts a speed.
"""

from __future__ import annotations

import copy
import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rigforge.bench.config import config_from_dict
from rigforge.bench.runner import run_bench
from rigforge.sandbox.model import ensure_gemma
from rigforge.updates.compare_render import render_markdown
from rigforge.updates.comparison import (
    CANNOT_TELL,
    METRICS,
    SAME,
    WORSE,
    RegressionPolicy,
    Tolerance,
    compare,
    find_results,
    last_before,
    load_result,
    repeat_values,
    spread_percent,
)
from rigforge.updates.history import last_before_driver_change
from rigforge.updates.verdict import VERDICTS
from tests.bench_support.captured import capture_text
from tests.bench_support.llama_server import start_llama_server

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_CACHE = REPO_ROOT / ".cache" / "models"
DECODE = METRICS[0]
REPEATS = 3


def bench_once(base_url: str, driver: str) -> dict[str, Any]:
    """One real bench run: C=1 at 32 input tokens, measured 3 times; driver is a label only."""
    config = config_from_dict({
        "base_url": base_url, "model": "gemma", "concurrency": [1], "input_tokens": [32], "output_tokens": 16,
        "cell_seconds": 1.0, "warmup_requests": 1, "request_timeout_s": 120, "repeats": REPEATS,
        # driver_version is a label here (no GPU on this box): it marks which runs are "before the update".
        "metadata": {"profile": "sandbox", "host": "bench-a", "driver_version": driver, "kernel": "test"},
    })
    return run_bench(config)


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    """Two real runs against Gemma: "before" labelled driver 590.48.01, "after" 595.45.04."""
    model = ensure_gemma(MODEL_CACHE)
    with start_llama_server(model, parallel=2, ctx=4096, log_dir=tmp_path_factory.mktemp("gemma")) as server:
        yield {"before": bench_once(server.base_url, "590.48.01"), "after": bench_once(server.base_url, "595.45.04")}


def save(root: Path, host: str, stamp: str, result: dict[str, Any]) -> Path:
    """A run directory as the bench role leaves it on the controller."""
    run = root / host / stamp
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps(result))
    return run


def scaled(result: dict[str, Any], factor: float) -> dict[str, Any]:
    """The result with every repeat's decode rate multiplied by ``factor`` (relative spread unchanged)."""
    copied = copy.deepcopy(result)
    for cell in copied["cells"]:
        blocks = [*cell["repeats"], cell["metrics"]]
        for block in {id(block): block for block in blocks}.values():  # scale each block once
            block["decode_tps_per_user"]["median"] *= factor
    return copied


def tightened(result: dict[str, Any], max_spread_percent: float) -> dict[str, Any]:
    """The result with its repeats pulled toward their median until their spread is at most
    ``max_spread_percent`` (their order and shape kept): a loaded machine can measure a spread past 100 %,
    where no drop could lie beyond the noise."""
    copied = copy.deepcopy(result)
    for cell in copied["cells"]:
        values = repeat_values(cell, DECODE)
        spread = spread_percent(values) or 0.0
        if spread <= max_spread_percent:
            continue
        middle, shrink = statistics.median(values), max_spread_percent / spread
        for block in cell["repeats"]:
            value = block["decode_tps_per_user"]["median"]
            block["decode_tps_per_user"]["median"] = middle + (value - middle) * shrink
    return copied


def decode_c1(comparison: Any) -> Any:
    return next(cell for cell in comparison.cells if cell.metric is DECODE and cell.concurrency == 1)


def test_every_cell_records_each_repeat(measured: dict[str, dict[str, Any]]) -> None:
    for result in measured.values():
        assert result["status"] == "ok", result["failed_checks"]
        for cell in result["cells"]:
            assert len(cell["repeats"]) == REPEATS
            assert all(value > 0 for value in repeat_values(cell, DECODE))


def test_two_real_runs_compare_with_their_measured_spread(measured: dict[str, dict[str, Any]]) -> None:
    policy = RegressionPolicy((Tolerance("decode_tps_per_user", 5.0, concurrency=1),))
    comparison = compare(measured["before"], measured["after"], policy)
    row = decode_c1(comparison)
    assert row.before_repeats == tuple(repeat_values(measured["before"]["cells"][0], DECODE))
    assert row.noise_percent is not None and row.noise_percent >= 0 and row.p_value is not None
    assert row.change_percent == pytest.approx((row.after - row.before) / row.before * 100)
    assert comparison.verdict in VERDICTS
    assert "C=1" in comparison.summary() and "→" in comparison.summary()
    rows = render_markdown(comparison)
    assert "| 1 | 32 | decode tok/s |" in rows and "driver_version: 590.48.01 → 595.45.04  (changed)" in rows


def test_a_run_against_itself_is_never_better_or_worse(measured: dict[str, dict[str, Any]]) -> None:
    policy = RegressionPolicy((Tolerance("decode_tps_per_user", 5.0),))
    assert compare(measured["before"], measured["before"], policy).verdict in (SAME, CANNOT_TELL)


def test_a_drop_is_claimed_only_past_the_tolerance_and_the_noise(measured: dict[str, dict[str, Any]]) -> None:
    # The real repeats, pulled in to a 10 % spread (a loaded box can measure 100 %, where nothing is claimable).
    before = tightened(measured["before"], max_spread_percent=10.0)
    policy = RegressionPolicy((Tolerance("decode_tps_per_user", 5.0, concurrency=1),))
    small = decode_c1(compare(before, scaled(before, 0.98), policy))   # inside the tolerance
    beyond = compare(before, scaled(before, 0.5), policy)               # far past tolerance and noise
    assert small.verdict in (SAME, CANNOT_TELL)
    assert beyond.verdict == WORSE and beyond.regressed
    row = decode_c1(beyond)
    assert row.noise_percent is not None and row.noise_percent < 50 and "p = " in row.note
    # Past the tolerance but inside twice the spread of one repeat: no claim.
    noisy = tightened(measured["before"], max_spread_percent=60.0)
    spread = spread_percent(repeat_values(noisy["cells"][0], DECODE)) or 0.0
    inside = decode_c1(compare(noisy, scaled(noisy, 1 - min(spread, 50) / 4 / 100), policy))
    assert inside.verdict != WORSE  # 2 sd of three repeats spanning r is at least r: 4x the drop


def test_a_cell_failed_after_the_update_is_a_regression(measured: dict[str, dict[str, Any]]) -> None:
    after = copy.deepcopy(measured["after"])
    after["cells"][0].update(status="failed", reason="timeout: no token in 120 s", metrics=None)
    policy = RegressionPolicy((Tolerance("decode_tps_per_user", 5.0),))
    assert compare(measured["before"], after, policy).verdict == WORSE


def test_history_finds_the_last_run_before_the_driver_changed(
    measured: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    first = save(tmp_path, "bench-a", "20261122T010000Z", measured["before"])
    second = save(tmp_path, "bench-a", "20261122T020000Z", measured["before"])
    latest = save(tmp_path, "bench-a", "20261123T010000Z", measured["after"])
    (tmp_path / "bench-a" / "latest").symlink_to(latest.name)
    assert find_results(tmp_path, "bench-a") == [first, second, latest]
    assert load_result(latest / "result.json") == load_result(latest)
    assert last_before_driver_change(tmp_path, "bench-a") == (second, latest)
    assert last_before(tmp_path, "bench-a", lambda result: True, before=second) == first
    assert last_before(tmp_path, "bench-a", lambda result: False) is None


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rigforge.updates.compare", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120, check=False)


def test_cli_prints_the_table_writes_a_png_and_fails_on_regression(
    measured: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    before = tightened(measured["before"], max_spread_percent=20.0)
    save(tmp_path, "bench-a", "20261122T010000Z", before)
    # 40 % slower decode: past the sandbox profile's 5 % at C=1 and twice a 20 % spread.
    slower = save(tmp_path, "bench-a", "20261123T010000Z", scaled(before, 0.6))
    slower_meta = load_result(slower)
    slower_meta["metadata"]["driver_version"] = "595.45.04"
    (slower / "result.json").write_text(json.dumps(slower_meta))
    regressed = run_cli("--host", "bench-a", "--results", str(tmp_path))
    assert regressed.returncode == 1, regressed.stdout + regressed.stderr
    assert "WORSE (REGRESSION)" in regressed.stdout and "| 1 | 32 | decode tok/s |" in regressed.stdout
    assert (slower / "compare-20261122T010000Z.png").stat().st_size > 0
    same = run_cli(str(tmp_path / "bench-a" / "20261122T010000Z"), str(tmp_path / "bench-a" / "20261122T010000Z"))
    assert same.returncode == 0 and ("SAME" in same.stdout or "CANNOT TELL" in same.stdout)


def test_cli_says_in_one_line_when_there_is_nothing_to_compare(tmp_path: Path) -> None:
    missing = run_cli("--host", "nowhere", "--results", str(tmp_path))
    assert missing.returncode == 2
    assert missing.stderr.strip().count("\n") == 0 and "no run on another driver" in missing.stderr


def test_repeats_that_are_all_slower_but_wildly_spread_cannot_tell_and_say_so(
    measured: dict[str, dict[str, Any]],
) -> None:
    # The numbers are the real "before" run; the "after" repeats are set by hand to the case a loaded,
    # throttled box produced: one repeat crawled, so the spread is huge, yet every repeat is slower. Three
    # repeats that far apart cannot support a claim either way (an exact rank test's p is 0.1 at best): the
    # verdict is "cannot tell", never "same", with the noise and how many repeats would decide.
    before = tightened(measured["before"], max_spread_percent=10.0)
    values = repeat_values(before["cells"][0], DECODE)
    after = copy.deepcopy(before)
    slow = min(values) * 0.5
    for block, value in zip(after["cells"][0]["repeats"], (slow * 0.1, slow * 0.5, slow), strict=True):
        block["decode_tps_per_user"]["median"] = value
    policy = RegressionPolicy((Tolerance("decode_tps_per_user", 5.0, concurrency=1),))
    row = decode_c1(compare(before, after, policy))
    assert row.verdict in (CANNOT_TELL, WORSE) and row.verdict != SAME
    assert row.noise_percent is not None and row.noise_percent > 100
    if row.verdict == CANNOT_TELL:
        assert "noise" in row.note


def test_chat_cells_never_compare_with_completion_cells_and_old_results_still_compare() -> None:
    """The recorded result predates cell kinds (no endpoint in its cells): its cells are completion cells."""
    before = json.loads(capture_text("result_gemma_sandbox.json"))
    assert all("endpoint" not in cell for cell in before["cells"])
    after = copy.deepcopy(before)
    for cell in after["cells"]:
        cell.update(endpoint="completions", thinking=None)
    chat = copy.deepcopy(after["cells"][0])
    chat.update(endpoint="chat", thinking=True)
    for block in [chat["metrics"], *(chat.get("repeats") or [])]:
        if block:
            block["decode_tps_per_user"]["median"] *= 2  # thinking tokens decode faster under MTP: must not leak
    after["cells"].append(chat)
    policy = RegressionPolicy((Tolerance("decode_tps_per_user", 5.0),))
    comparison = compare(before, after, policy)
    decode = [row for row in comparison.cells if row.metric == DECODE]
    assert [row.where for row in decode] == ["C=1 in=48", "C=1 in=160", "C=2 in=48", "C=2 in=160",
                                             "C=1 in=48 (chat, thinking on)"]
    assert all(row.change_percent == 0.0 for row in decode[:4])
    assert (decode[4].before, decode[4].note, decode[4].verdict) == (None, "failed or missing before", "")
    assert comparison.verdict == CANNOT_TELL  # a result measured once: no repeats, no spread, no claim
    assert "| 1 (chat, thinking on) | 48 | decode tok/s |" in render_markdown(comparison)
