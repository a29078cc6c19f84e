"""Build generation requests and send them: one call, one measured RequestRecord."""

from __future__ import annotations

import json
from typing import Any

from rigforge.bench.config import ENDPOINT_PATHS, BenchConfig, CellKind
from rigforge.bench.stream import RequestRecord, build_record
from rigforge.bench.transport import post_stream, request


def build_payload(config: BenchConfig, kind: CellKind, prompt: str, max_tokens: int,
                  fixed_length: bool) -> dict[str, Any]:
    """A streaming, greedy request with usage reporting.

    + kind: the endpoint (a chat prompt is one user message, templated by the server) and, for chat, the
      thinking switch (``chat_template_kwargs.enable_thinking``; None sends none: the template's default)
    + fixed_length: send ``ignore_eos`` so exactly ``max_tokens`` tokens come back (workload
      requests); the fixed-answer probes leave it off so the model may stop on its own.
    """
    payload: dict[str, Any] = {
        "model": config.model,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if kind.endpoint == "chat":
        payload["messages"] = [{"role": "user", "content": prompt}]
    else:
        payload["prompt"] = prompt
    if kind.thinking is not None:
        payload["chat_template_kwargs"] = {"enable_thinking": kind.thinking}
    if fixed_length:
        payload["ignore_eos"] = True
    return payload


def send(config: BenchConfig, kind: CellKind, prompt: str, max_tokens: int, fixed_length: bool,
         origin: float) -> RequestRecord:
    """Send one streaming request and measure it; ``origin`` is the perf_counter zero of the cell."""
    payload = build_payload(config, kind, prompt, max_tokens, fixed_length)
    raw = post_stream(config.root_url, ENDPOINT_PATHS[kind.endpoint], payload, config.request_timeout_s)
    return build_record(raw, origin)


def count_tokens(config: BenchConfig, text: str) -> int | None:
    """Tokens in ``text`` by the server's own tokenizer (``/tokenize``), without added special tokens.

    The body carries the field names of both llama.cpp (``content``, ``add_special``, ``parse_special``:
    a special token's text counts as that one token) and vLLM (``prompt``, ``add_special_tokens``); each
    ignores the other's. None when the server has no tokenizer endpoint.
    """
    body = {"model": config.model, "content": text, "prompt": text, "add_special": False, "parse_special": True,
            "add_special_tokens": False}
    status, answer = request(config.root_url, "POST", "/tokenize", body, config.request_timeout_s)
    if status != 200:
        return None
    try:
        data = json.loads(answer)
    except ValueError:
        return None
    if isinstance(data.get("count"), int):
        return int(data["count"])
    tokens = data.get("tokens")
    return len(tokens) if isinstance(tokens, list) else None
