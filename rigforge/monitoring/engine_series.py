"""The engines' own metrics, by what they mean: one PromQL expression per quantity, over every engine that
exports it, summed per rig (series of one rig's engine carry that rig's ``rig`` label and the ``rigforge-engine``
job).

Names as each engine's source defines them: vLLM v0.19's ``vllm/v1/metrics/loggers.py`` (``vllm:``), SGLang
0.5's ``python/sglang/srt/metrics/collector.py`` (``sglang:``) and llama.cpp's server (``llamacpp:``, read from the
sandbox's xllamacpp build: no KV-cache or latency histograms there). A quantity an engine lacks is left out of
its expression, so its rules stay silent on that engine rather than guessing.

    engine_rule_context(profile.monitoring.alerts, rate_window_s=300)["waiting"]
    # 'sum by (rig) (vllm:num_requests_waiting) or sum by (rig) (sglang:num_queue_reqs) or ...'
"""

from __future__ import annotations

from rigforge.profile.monitoring import Alerts
from rigforge.render import PanelSpec, timeseries_panels

#: The dashboard's selector of one rig (its ``rig`` variable).
_RIG = '{rig="$rig"}'

#: quantity -> engine -> its series. Gauges: running and waiting requests, KV-cache use (0..1); counters:
#: generated and prompt tokens; histograms: time to first token and inter-token latency (seconds).
ENGINE_SERIES: dict[str, dict[str, str]] = {
    "running": {"vllm": "vllm:num_requests_running", "sglang": "sglang:num_running_reqs",
                "llama.cpp": "llamacpp:requests_processing"},
    "waiting": {"vllm": "vllm:num_requests_waiting", "sglang": "sglang:num_queue_reqs",
                "llama.cpp": "llamacpp:requests_deferred"},
    "kv_cache": {"vllm": "vllm:kv_cache_usage_perc", "sglang": "sglang:token_usage"},
    "generated": {"vllm": "vllm:generation_tokens_total", "sglang": "sglang:generation_tokens_total",
                  "llama.cpp": "llamacpp:tokens_predicted_total"},
    "prompt": {"vllm": "vllm:prompt_tokens_total", "sglang": "sglang:prompt_tokens_total",
               "llama.cpp": "llamacpp:prompt_tokens_total"},
    "ttft": {"vllm": "vllm:time_to_first_token_seconds", "sglang": "sglang:time_to_first_token_seconds"},
    "itl": {"vllm": "vllm:inter_token_latency_seconds", "sglang": "sglang:inter_token_latency_seconds"},
}


def per_rig(quantity: str, aggregate: str = "sum", selector: str = "", rate_window: str | None = None) -> str:
    """One quantity over every engine that exports it, one series per rig.

    + quantity: a key of ENGINE_SERIES
    + aggregate: sum (requests, tokens) or max (a ratio)
    + selector: label matchers added to each series, e.g. ``{rig="$rig"}``
    + rate_window: a range for counters (``5m``): their per-second rate
    """
    parts = []
    for series in ENGINE_SERIES[quantity].values():
        inner = f"{series}{selector}"
        if rate_window:
            inner = f"rate({inner}[{rate_window}])"
        parts.append(f"{aggregate} by (rig) ({inner})")
    return " or ".join(parts)


def p95(quantity: str, rate_window: str, selector: str = "") -> str:
    """The 95th percentile of a latency histogram over ``rate_window``, one series per rig."""
    buckets = " or ".join(f"sum by (rig, le) (rate({series}_bucket{selector}[{rate_window}]))"
                          for series in ENGINE_SERIES[quantity].values())
    return f"histogram_quantile(0.95, {buckets})"


def engine_rule_context(alerts: Alerts, rate_window_s: int) -> dict[str, str]:
    """What the engine rules read: each quantity's expression and the profile's limits (monitoring.alerts)."""
    window = f"{rate_window_s}s"
    return {"running": per_rig("running"), "waiting": per_rig("waiting"), "kv_cache": per_rig("kv_cache", "max"),
            "generated_rate": per_rig("generated", rate_window=window), "ttft_p95": p95("ttft", window),
            "itl_p95": p95("itl", window), "rate_window": window,
            "saturated_for_s": str(alerts.engine_saturated_for_s), "kv_cache_full": f"{alerts.kv_cache_full_ratio:g}",
            "ttft_max_s": f"{alerts.ttft_p95_max_s:g}", "itl_max_s": f"{alerts.itl_p95_max_s:g}"}


#: The engine panels of the dashboard: title, unit, then (legend, expression) per line; ``$rig`` and
#: ``$__rate_interval`` are Grafana's.
_PANELS: list[PanelSpec] = [
    ("Engine: tokens per second (generated, prompt)", "short", [
        ("generated", per_rig("generated", selector=_RIG, rate_window="$__rate_interval")),
        ("prompt", per_rig("prompt", selector=_RIG, rate_window="$__rate_interval"))]),
    ("Engine: requests running and waiting", "short", [
        ("running", per_rig("running", selector=_RIG)), ("waiting", per_rig("waiting", selector=_RIG))]),
    ("Engine: KV-cache use (vLLM, SGLang)", "percentunit", [("KV cache", per_rig("kv_cache", "max", _RIG))]),
    ("Engine: p95 time to first token and inter-token latency (vLLM, SGLang)", "s", [
        ("TTFT p95", p95("ttft", "$__rate_interval", _RIG)), ("ITL p95", p95("itl", "$__rate_interval", _RIG))]),
]


def engine_panels(first_id: int, first_y: int) -> list[dict[str, object]]:
    """The dashboard's engine panels (Grafana JSON), two a row from ``first_y``."""
    return timeseries_panels(_PANELS, first_id, first_y)
