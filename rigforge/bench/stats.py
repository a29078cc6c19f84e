"""Summary statistics named the way ``vllm bench serve`` names them (pure functions)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

LATENCY_PERCENTILES = (90, 99)
# For a rate (higher is better) the slow tail is the low percentiles.
RATE_PERCENTILES = (10, 1)


def percentile(values: Sequence[float], percent: float) -> float:
    """Linear-interpolated percentile, the same as numpy's default (which vLLM uses)."""
    if not values:
        raise ValueError("percentile of an empty sequence")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * percent / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(values: Sequence[float], percents: Sequence[int] = LATENCY_PERCENTILES) -> dict[str, float] | None:
    """mean, median and the given percentiles (keys ``p90`` ...), or None when there is no sample."""
    if not values:
        return None
    summary = {"mean": statistics.fmean(values), "median": statistics.median(values)}
    for percent in percents:
        summary[f"p{percent}"] = percentile(values, percent)
    return {key: round(value, 3) for key, value in summary.items()}


def tpot_ms(e2el_ms: float, ttft_ms: float, output_tokens: int) -> float | None:
    """Time per output token after the first: (E2EL - TTFT) / (tokens - 1); None below two tokens."""
    if output_tokens < 2:
        return None
    return (e2el_ms - ttft_ms) / (output_tokens - 1)


def rate_per_second(milliseconds: float) -> float | None:
    """Events per second for an interval in milliseconds (decode tok/s per user = 1000 / TPOT)."""
    if milliseconds <= 0:
        return None
    return 1000.0 / milliseconds


def mean_in_flight(busy_ms: Sequence[float], window_s: float) -> float | None:
    """Average number of requests in flight over the window: sum of request durations / window."""
    if window_s <= 0:
        return None
    return round(sum(busy_ms) / 1000.0 / window_s, 3)
