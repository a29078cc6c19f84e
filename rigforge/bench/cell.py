"""One cell: C workers sending fixed-length requests back-to-back for a time window, then its numbers.

Requests in flight when the window closes are allowed to finish, so every measured request
has its full output; the cell's duration runs to the last completion, and the achieved
concurrency (mean requests in flight) is recorded so a ragged tail is visible.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rigforge.bench import sanity
from rigforge.bench.config import BenchConfig
from rigforge.bench.server_metrics import cross_check
from rigforge.bench.stats import RATE_PERCENTILES, mean_in_flight, rate_per_second, summarize
from rigforge.bench.stream import RequestRecord

SAMPLE_TEXTS_KEPT = 3
SAMPLE_TEXT_CHARS = 500

Sender = Callable[[float], RequestRecord]  # sends one request, given the cell's perf_counter origin


def run_requests(concurrency: int, sender: Sender, deadline: float | None, total: int | None) -> list[RequestRecord]:
    """Run ``concurrency`` workers back-to-back until ``deadline`` passes or ``total`` requests were sent."""
    origin = time.perf_counter()
    records: list[RequestRecord] = []
    lock = threading.Lock()
    issued = [0]

    def claim() -> bool:
        with lock:
            if total is not None and issued[0] >= total:
                return False
            if deadline is not None and time.perf_counter() >= deadline:
                return False
            issued[0] += 1
            return True

    def worker() -> None:
        while claim():
            record = sender(origin)
            with lock:
                records.append(record)

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for future in [pool.submit(worker) for _ in range(concurrency)]:
            future.result()
    return sorted(records, key=lambda record: record.start_s)


def request_arrays(records: list[RequestRecord], failures: list[sanity.CheckResult | None]) -> dict[str, list[Any]]:
    """Per-request arrays for the result file (vLLM's --save-detailed names where they exist)."""
    return {
        "start_s": [record.start_s for record in records],
        "input_lens": [record.prompt_tokens for record in records],
        "output_lens": [record.completion_tokens for record in records],
        "output_chunks": [record.output_chunks for record in records],
        "cached_tokens": [record.cached_tokens for record in records],
        "ttfts_ms": [record.ttft_ms for record in records],
        "e2els_ms": [record.e2el_ms for record in records],
        "tpots_ms": [None if record.tpot_ms is None else round(record.tpot_ms, 3) for record in records],
        "itls_ms": [record.itls_ms for record in records],
        "finish_reasons": [record.finish_reason for record in records],
        "server_decode_tps": [record.server_decode_tps for record in records],
        "errors": [None if failure is None else f"{failure.name}: {failure.detail}" for failure in failures],
    }


def cell_metrics(records: list[RequestRecord], duration_s: float) -> dict[str, Any]:
    """The cell's numbers, every token count from ``usage`` (chunk counts only beside them)."""
    output_tokens = sum(record.completion_tokens or 0 for record in records)
    input_tokens = sum(record.prompt_tokens or 0 for record in records)
    tpots = [record.tpot_ms for record in records if record.tpot_ms is not None]
    per_user = [rate for rate in (rate_per_second(tpot) for tpot in tpots) if rate is not None]
    server_rates = [record.server_decode_tps for record in records if record.server_decode_tps is not None]
    return {
        "completed": len(records),
        "failed": 0,
        "duration_s": round(duration_s, 4),
        "mean_in_flight": mean_in_flight([record.e2el_ms or 0.0 for record in records], duration_s),
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "total_output_chunks": sum(record.output_chunks for record in records),
        "request_throughput": round(len(records) / duration_s, 4),
        "output_throughput": round(output_tokens / duration_s, 3),
        "total_token_throughput": round((input_tokens + output_tokens) / duration_s, 3),
        "ttft_ms": summarize([record.ttft_ms for record in records if record.ttft_ms is not None]),
        "tpot_ms": summarize(tpots),
        "itl_ms": summarize([gap for record in records for gap in record.itls_ms]),
        "e2el_ms": summarize([record.e2el_ms for record in records if record.e2el_ms is not None]),
        "decode_tps_per_user": summarize(per_user, RATE_PERCENTILES),
        "server_decode_tps_per_user": summarize(server_rates, RATE_PERCENTILES),
    }


@dataclass(frozen=True)
class CellJudgement:
    """Per-request failures, the text checks over the cell's outputs, and every failed check."""

    request_failures: list[sanity.CheckResult | None]
    text_checks: list[sanity.CheckResult]
    failed: list[sanity.CheckResult]


def judge_cell(records: list[RequestRecord], config: BenchConfig, target_prompt_tokens: int | None) -> CellJudgement:
    """Run the request checks on every request and the text checks on every output of the cell."""
    failures = [sanity.request_failure(record, config.output_tokens, target_prompt_tokens) for record in records]
    failed = sanity.summarize_request_failures([item for item in failures if item is not None], len(records))
    if not records:
        failed.append(sanity.CheckResult(sanity.REQUEST_ERROR, False, "no request completed in the window"))
    texts = sanity.text_checks([record.text for record in records if record.text])
    return CellJudgement(failures, texts, failed + [check for check in texts if not check.passed])


def cell_result(
    concurrency: int,
    input_tokens: int,
    records: list[RequestRecord],
    duration_s: float,
    config: BenchConfig,
    target_prompt_tokens: int | None,
    metrics_before: dict[str, float] | None,
    metrics_after: dict[str, float] | None,
) -> dict[str, Any]:
    """The cell's JSON: status, failed checks by name, metrics (only when ok), arrays and server numbers."""
    judgement = judge_cell(records, config, target_prompt_tokens)
    failed = judgement.failed
    client_tokens = sum(record.completion_tokens or 0 for record in records)
    status = "failed" if failed else "ok"
    return {
        "concurrency": concurrency,
        "input_tokens": input_tokens,
        "output_tokens": config.output_tokens,
        "status": status,
        "reason": "; ".join(f"{check.name}: {check.detail}" for check in failed) or None,
        "failed_checks": [check.as_dict() for check in failed],
        "text_checks": [check.as_dict() for check in judgement.text_checks],
        "request_counts": {"sent": len(records), "failed": sum(1 for item in judgement.request_failures if item)},
        "metrics": cell_metrics(records, duration_s) if status == "ok" else None,
        "requests": request_arrays(records, judgement.request_failures),
        "sample_outputs": [record.text[:SAMPLE_TEXT_CHARS] for record in records[:SAMPLE_TEXTS_KEPT]],
        "server": cross_check(metrics_before, metrics_after, client_tokens),
    }


def failed_cell(concurrency: int, input_tokens: int, output_tokens: int, check: sanity.CheckResult) -> dict[str, Any]:
    """A cell that could not run (its prompt could not be built), failed with the check that stopped it."""
    return {
        "concurrency": concurrency,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "status": "failed",
        "reason": f"{check.name}: {check.detail}",
        "failed_checks": [check.as_dict()],
        "text_checks": [],
        "request_counts": {"sent": 0, "failed": 0},
        "metrics": None,
        "requests": None,
        "sample_outputs": [],
        "server": {"available": False},
    }
