"""Bench comparison on real measured numbers: the real bench client against a real llama.cpp server
(xllamacpp) serving Gemma 3 270M on 127.0.0.1, two engine starts a side with repeats, kept as
``results/<host>/<stamp>/``.

What is real: every number (four bench runs, each in its own start of the server, each cell measured 3 times).
What is derived, and why: to show each verdict deterministically on a shared 2-core box, the "after" of some
tests is the real "before" with every repeat scaled by a factor chosen from the *measured* spread (scaling keeps
the spread), and a side's starts may be pulled toward their common value first (a loaded box can put two starts
50 % apart, where no drop is claimable), so "worse (regression)" and "cannot tell" are reached by construction,
not by hoping the box slows down. The real driver slowdown (a throttled container) is the rollout e2e test's
job. No test asserts a speed.
"""

from __future__ import annotations

import copy
import json
import statistics
import subprocess
import sys
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
    cell_value,
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
STARTS = 2  # engine starts a side: the fewest that measure the start-to-start spread


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
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Real runs against Gemma, each in its own server start, starts interleaved (before, after, before, after):
    "before" labelled driver 590.48.01, "after" 595.45.04."""
    model = ensure_gemma(MODEL_CACHE)
    sides: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for _ in range(STARTS):
        for side, driver in (("before", "590.48.01"), ("after", "595.45.04")):
            with start_llama_server(model, parallel=2, ctx=4096,
                                    log_dir=tmp_path_factory.mktemp("gemma")) as server:
                sides[side].append(bench_once(server.base_url, driver))
    return sides


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


def scaled_side(side: list[dict[str, Any]], factor: float) -> list[dict[str, Any]]:
    return [scaled(result, factor) for result in side]


def tightened(side: list[dict[str, Any]], max_spread_percent: float) -> list[dict[str, Any]]:
    """The side with each start's repeats pulled toward their median, and each start as a whole toward the
    side's first start, until each spread is at most ``max_spread_percent`` (order and shape kept): a loaded
    machine can measure a spread past 100 %, where no drop could lie beyond the noise."""
    copied = copy.deepcopy(side)
    for result in copied:
        for cell in result["cells"]:
            values = repeat_values(cell, DECODE)
            spread = spread_percent(values) or 0.0
            if spread <= max_spread_percent:
                continue
            middle, shrink = statistics.median(values), max_spread_percent / spread
            for block in cell["repeats"]:
                value = block["decode_tps_per_user"]["median"]
                block["decode_tps_per_user"]["median"] = middle + (value - middle) * shrink
    for index, cell in enumerate(copied[0]["cells"]):
        anchor = cell_value(cell, DECODE) or 1.0
        for result in copied[1:]:
            other = cell_value(result["cells"][index], DECODE) or anchor
            ratio = other / anchor
            limit = 1 + max_spread_percent / 200
            wanted = min(max(ratio, 1 / limit), limit)
            result["cells"][index] = scaled({"cells": [result["cells"][index]]}, wanted / ratio)["cells"][0]
    return copied


def decode_c1(comparison: Any) -> Any:
    return next(cell for cell in comparison.cells if cell.metric is DECODE and cell.concurrency == 1)


def test_every_cell_records_each_repeat(measured: dict[str, list[dict[str, Any]]]) -> None:
    for side in measured.values():
        assert len(side) == STARTS
        for result in side:
            assert result["status"] == "ok", result["failed_checks"]
            for cell in result["cells"]:
                assert len(cell["repeats"]) == REPEATS
                assert all(value > 0 for value in repeat_values(cell, DECODE))


def test_two_real_runs_compare_with_their_measured_spread(measured: dict[str, list[dict[str, Any]]]) -> None:
    policy = RegressionPolicy((Tolerance("decode_tps_per_user", 5.0, concurrency=1),))
    comparison = compare(measured["before"], measured["after"], policy)
    row = decode_c1(comparison)
    assert row.before_repeats == tuple(value for result in measured["before"]
                                       for value in repeat_values(result["cells"][0], DECODE))
    assert row.before_starts == tuple(cell_value(result["cells"][0], DECODE) for result in measured["before"])
    assert row.noise_percent is not None and row.noise_percent >= 0 and row.p_value is not None
    assert row.change_percent == pytest.approx((row.after - row.before) / row.before * 100)
    assert comparison.verdict in VERDICTS
    assert "C=1" in comparison.summary() and "→" in comparison.summary()
    rows = render_markdown(comparison)
    assert "| 1 | 32 | decode tok/s | 2 / 2 |" in rows
    assert "driver_version: 590.48.01 → 595.45.04  (changed)" in rows


def test_a_run_against_itself_is_never_better_or_worse(measured: dict[str, list[dict[str, Any]]]) -> None:
    policy = RegressionPolicy((Tolerance("decode_tps_per_user", 5.0),))
    assert compare(measured["before"], measured["before"], policy).verdict in (SAME, CANNOT_TELL)
    one = compare(measured["before"][0], measured["after"][0], policy)  # one start a side: the old call
    assert one.verdict == CANNOT_TELL and "one engine start a side" in decode_c1(one).note


def test_a_drop_is_claimed_only_past_the_tolerance_and_the_noise(measured: dict[str, list[dict[str, Any]]]) -> None:
    # The real starts, pulled in to a 5 % spread (a loaded box can measure 100 %, where nothing is claimable).
    before = tightened(measured["before"], max_spread_percent=5.0)
    policy = RegressionPolicy((Tolerance("decode_tps_per_user", 5.0, concurrency=1),))
    small = decode_c1(compare(before, scaled_side(before, 0.98), policy))   # inside the tolerance
    beyond = compare(before, scaled_side(before, 0.5), policy)              # far past tolerance and noise
    assert small.verdict in (SAME, CANNOT_TELL)
    assert beyond.verdict == WORSE and beyond.regressed
    row = decode_c1(beyond)
    assert row.noise_percent is not None and row.noise_percent < 50 and "past tolerance 5 %" in row.note
    low, high = row.interval_percent or (0.0, 0.0)
    assert low < high < -5.0  # the whole interval past the tolerance
    # Past the tolerance but a quarter of the two starts' own spread: the interval of two starts a side is wide.
    noisy = tightened(measured["before"], max_spread_percent=60.0)
    starts = [value for value in decode_c1(compare(noisy, noisy, policy)).before_starts]
    spread = spread_percent(starts) or 0.0
    inside = decode_c1(compare(noisy, scaled_side(noisy, 1 - min(spread, 50) / 4 / 100), policy))
    assert inside.verdict != WORSE


def test_a_cell_failed_after_the_update_is_a_regression(measured: dict[str, list[dict[str, Any]]]) -> None:
    after = copy.deepcopy(measured["after"])
    after[-1]["cells"][0].update(status="failed", reason="timeout: no token in 120 s", metrics=None)
    policy = RegressionPolicy((Tolerance("decode_tps_per_user", 5.0),))
    assert compare(measured["before"], after, policy).verdict == WORSE


def test_history_finds_the_last_run_before_the_driver_changed(
    measured: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    first = save(tmp_path, "bench-a", "20261122T010000Z", measured["before"][0])
    second = save(tmp_path, "bench-a", "20261122T020000Z", measured["before"][1])
    latest = save(tmp_path, "bench-a", "20261123T010000Z", measured["after"][0])
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
    measured: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    before = tightened(measured["before"], max_spread_percent=10.0)
    olds = [save(tmp_path, "bench-a", f"20261122T01000{index}Z", result) for index, result in enumerate(before)]
    # 40 % slower decode: past the sandbox profile's 5 % at C=1 and the starts' 10 % spread.
    news = []
    for index, result in enumerate(scaled_side(before, 0.6)):
        result["metadata"]["driver_version"] = "595.45.04"
        news.append(save(tmp_path, "bench-a", f"20261123T01000{index}Z", result))
    regressed = run_cli(",".join(map(str, olds)), ",".join(map(str, news)))
    assert regressed.returncode == 1, regressed.stdout + regressed.stderr
    assert "WORSE (REGRESSION)" in regressed.stdout and "| 1 | 32 | decode tok/s | 2 / 2 |" in regressed.stdout
    assert (news[0] / f"compare-{olds[0].name}.png").stat().st_size > 0
    single = run_cli("--host", "bench-a", "--results", str(tmp_path))  # the last start on each driver: one a side
    assert single.returncode == 0 and "CANNOT TELL" in single.stdout and "one engine start a side" in single.stdout
    assert "resolution (primary): 2 vs 2 starts at a start-to-start spread of" in regressed.stdout
    same = run_cli(",".join(map(str, olds)), ",".join(map(str, olds)))
    assert same.returncode == 0 and ("SAME" in same.stdout or "CANNOT TELL" in same.stdout)


def test_cli_says_in_one_line_when_there_is_nothing_to_compare(tmp_path: Path) -> None:
    missing = run_cli("--host", "nowhere", "--results", str(tmp_path))
    assert missing.returncode == 2
    assert missing.stderr.strip().count("\n") == 0 and "no run on another driver" in missing.stderr


def test_repeats_that_are_all_slower_but_wildly_spread_cannot_tell_and_say_so(
    measured: dict[str, list[dict[str, Any]]],
) -> None:
    # The numbers are the real "before" starts; the "after" starts are set by hand to the case a loaded,
    # throttled box produced: one start crawled, so the spread between starts is huge, yet every start is
    # slower. Two starts that far apart cannot support a claim either way: the verdict is "cannot tell", never
    # "same", with the noise and whether more starts would decide.
    before = tightened(measured["before"], max_spread_percent=10.0)
    values = decode_c1(compare(before, before, RegressionPolicy())).before_starts
    after = copy.deepcopy(before)
    slow = min(values) * 0.5
    for result, value in zip(after, (slow * 0.1, slow), strict=True):
        cell = result["cells"][0]
        factor = value / (cell_value(cell, DECODE) or 1.0)
        result["cells"][0] = scaled({"cells": [cell]}, factor)["cells"][0]
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
