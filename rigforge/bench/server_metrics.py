"""The server's own counters from ``/metrics`` (Prometheus text), read before and after each cell.

They let a reader cross-check the client: the server's generated-token delta should equal the
sum of ``usage.completion_tokens`` over the cell, and speculative-decoding counters give the
acceptance rate the server saw.
"""

from __future__ import annotations

import math
import re
from typing import Any

# Counter families per engine: generated tokens, prompt tokens and spec-decode counters.
GENERATION_COUNTERS = (
    "llamacpp:tokens_predicted_total",
    "vllm:generation_tokens_total",
    "sglang:generation_tokens_total",
)
TRACKED_COUNTERS = GENERATION_COUNTERS + (
    "llamacpp:prompt_tokens_total",
    "llamacpp:prompt_tokens_cached_total",
    "llamacpp:spec_decode_num_drafts_total",
    "llamacpp:spec_decode_num_draft_tokens_total",
    "llamacpp:spec_decode_num_accepted_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total",
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
    "sglang:prompt_tokens_total",
    "sglang:cached_tokens_total",
)
# Gauges are read after the cell only (a before/after difference means nothing for them).
TRACKED_GAUGES = ("sglang:spec_accept_length", "sglang:cache_hit_rate", "sglang:gen_throughput")
SAMPLE_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
# Every tensor-parallel rank reports the same tokens (SGLang labels them tp_rank): count rank 0 only.
OTHER_TP_RANK = re.compile(r'\btp_rank="(?!0")[^"]*"')


def parse_prometheus(text: str) -> dict[str, float]:
    """Sum every sample of each metric over its label sets (data-parallel engines add up)."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE_LINE.match(line)
        if match is None or OTHER_TP_RANK.search(match.group(2) or ""):
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            totals[match.group(1)] = totals.get(match.group(1), 0.0) + value
    return totals


def counter_deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """after - before for the tracked counters present in both snapshots."""
    return {name: after[name] - before[name] for name in TRACKED_COUNTERS if name in before and name in after}


def _family(deltas: dict[str, float], suffix: str) -> float | None:
    """The delta of whichever engine's counter ends in ``suffix``."""
    for name, value in deltas.items():
        if name.endswith(suffix):
            return value
    return None


def cross_check(before: dict[str, float] | None, after: dict[str, float] | None, client_tokens: int) -> dict[str, Any]:
    """Server-side numbers for one cell beside the client's usage-based token total."""
    if before is None or after is None:
        return {"available": False}
    deltas = counter_deltas(before, after)
    server_tokens = next((deltas[name] for name in GENERATION_COUNTERS if name in deltas), None)
    report: dict[str, Any] = {
        "available": True,
        "counter_deltas": deltas,
        "gauges_after": {name: after[name] for name in TRACKED_GAUGES if name in after},
        "server_generation_tokens": server_tokens,
        "client_usage_tokens": client_tokens,
        "tokens_match": server_tokens is not None and int(server_tokens) == client_tokens,
    }
    drafts = _family(deltas, "spec_decode_num_drafts_total")
    draft_tokens = _family(deltas, "spec_decode_num_draft_tokens_total")
    accepted = _family(deltas, "spec_decode_num_accepted_tokens_total")
    if draft_tokens and accepted is not None:
        report["spec_decode_acceptance_rate"] = round(accepted / draft_tokens, 4)
    if drafts and accepted is not None:
        report["spec_decode_acceptance_length"] = round(1.0 + accepted / drafts, 4)
    return report
