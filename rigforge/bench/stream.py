"""Turn a timestamped server-sent-event stream into one request's measurements (pure functions).

Both wire formats are read: llama.cpp puts ``usage`` (and its own ``timings``) in the finish
chunk that also carries ``choices``; vLLM and SGLang send it in a separate ``choices: []``
chunk. Completions put text in ``choices[0].text``, chat in ``choices[0].delta.content``
(and reasoning models in ``delta.reasoning_content`` or ``delta.reasoning``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from rigforge.bench import stats
from rigforge.bench.transport import RawStream


@dataclass(frozen=True)
class Chunk:
    """The parts of one ``data:`` event that the benchmark uses."""

    at: float
    text: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    error: str | None = None
    non_finite: bool = False

    @property
    def carries_output(self) -> bool:
        """True when the chunk delivers generated text (content or reasoning)."""
        return bool(self.text or self.reasoning)


@dataclass
class RequestRecord:
    """Everything measured about one request; times are milliseconds from when it was sent."""

    start_s: float = 0.0
    status: int = 0
    transport_error: str | None = None
    error_body: str = ""
    stream_errors: list[str] = field(default_factory=list)
    non_finite: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    first_event_ms: float | None = None
    ttft_ms: float | None = None
    e2el_ms: float | None = None
    itls_ms: list[float] = field(default_factory=list)
    output_chunks: int = 0
    events: int = 0
    finish_reason: str | None = None
    text: str = ""  # every generated character: reasoning, then content
    content: str = ""  # the answer (``text`` of a completion, ``delta.content`` of a chat)
    reasoning: str = ""  # what a reasoning parser split out (``delta.reasoning_content`` or ``delta.reasoning``)
    server_decode_tps: float | None = None
    server_predicted_n: int | None = None

    @property
    def tpot_ms(self) -> float | None:
        """(E2EL - TTFT) / (completion_tokens - 1), from the server's token count."""
        if self.ttft_ms is None or self.e2el_ms is None or self.completion_tokens is None:
            return None
        return stats.tpot_ms(self.e2el_ms, self.ttft_ms, self.completion_tokens)


def has_non_finite(value: Any) -> bool:
    """True if a parsed JSON value holds NaN or infinity anywhere (Python's json accepts them)."""
    if isinstance(value, float):
        return math.isnan(value) or math.isinf(value)
    if isinstance(value, dict):
        return any(has_non_finite(item) for item in value.values())
    if isinstance(value, list):
        return any(has_non_finite(item) for item in value)
    return False


def _as_int(value: Any) -> int | None:
    """An integer count, or None for anything else (missing, null, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value)


def _as_float(value: Any) -> float | None:
    """A finite number, or None (so the result file never holds NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _error_text(value: Any) -> str:
    """A short description of an ``error`` member (string or OpenAI-style object)."""
    if isinstance(value, dict):
        return str(value.get("message") or value.get("type") or value)[:500]
    return str(value)[:500]


def interpret_chunk(data: dict[str, Any], at: float) -> Chunk:
    """Read one parsed ``data:`` object of a completions or chat stream."""
    if "error" in data and data["error"]:
        return Chunk(at=at, error=_error_text(data["error"]))
    text, reasoning, finish_reason = "", "", None
    choices = data.get("choices") or []
    if choices and isinstance(choices[0], dict):
        choice = choices[0]
        delta = choice.get("delta")
        if isinstance(delta, dict):
            text = delta.get("content") or ""
            reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
        else:
            text = choice.get("text") or ""
        finish_reason = choice.get("finish_reason")
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else None
    timings = data.get("timings") if isinstance(data.get("timings"), dict) else None
    return Chunk(at, str(text), str(reasoning), finish_reason, usage, timings, None, has_non_finite(data))


def parse_line(line: str, at: float) -> Chunk | None:
    """One SSE line as a Chunk; None for ``[DONE]``, comments and other fields."""
    if line.startswith("error:"):
        return Chunk(at=at, error=line[len("error:") :].strip()[:500])
    if not line.startswith("data:"):
        return None
    payload = line[len("data:") :].strip()
    if payload == "[DONE]":
        return None
    try:
        data = json.loads(payload)
    except ValueError:
        return Chunk(at=at, error=f"unparseable event: {payload[:200]}")
    if not isinstance(data, dict):
        return Chunk(at=at, error=f"unexpected event: {payload[:200]}")
    return interpret_chunk(data, at)


def _apply_usage(record: RequestRecord, usage: dict[str, Any]) -> None:
    """Copy the server's token counts into the record."""
    record.prompt_tokens = _as_int(usage.get("prompt_tokens"))
    record.completion_tokens = _as_int(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    record.cached_tokens = _as_int(details.get("cached_tokens")) if isinstance(details, dict) else None


def _ms(later: float, earlier: float) -> float:
    """Milliseconds between two perf_counter readings, rounded to the microsecond."""
    return round((later - earlier) * 1000.0, 3)


def build_record(raw: RawStream, cell_origin: float) -> RequestRecord:
    """Measure one request from its raw stream: TTFT, E2EL, ITLs, chunk counts and usage."""
    record = RequestRecord(start_s=round(raw.sent_at - cell_origin, 6), status=raw.status)
    record.transport_error = raw.transport_error
    record.error_body = raw.body[:1000]
    chunks = [chunk for chunk in (parse_line(line, at) for at, line in raw.lines) if chunk is not None]
    record.events = len(chunks)
    previous_output_at: float | None = None
    pieces: list[str] = []
    answer: list[str] = []
    reasoning: list[str] = []
    for chunk in chunks:
        if chunk.error is not None:
            record.stream_errors.append(chunk.error)
            continue
        record.non_finite = record.non_finite or chunk.non_finite
        if record.first_event_ms is None:
            record.first_event_ms = _ms(chunk.at, raw.sent_at)
        if chunk.usage is not None:
            _apply_usage(record, chunk.usage)  # the last usage seen is the cumulative one
        if chunk.timings is not None:
            record.server_decode_tps = _as_float(chunk.timings.get("predicted_per_second"))
            record.server_predicted_n = _as_int(chunk.timings.get("predicted_n"))
        if chunk.finish_reason:
            record.finish_reason = chunk.finish_reason
        if not chunk.carries_output:
            continue
        pieces.append(chunk.reasoning + chunk.text)
        answer.append(chunk.text)
        reasoning.append(chunk.reasoning)
        record.output_chunks += 1
        if previous_output_at is None:
            record.ttft_ms = _ms(chunk.at, raw.sent_at)
        else:
            record.itls_ms.append(_ms(chunk.at, previous_output_at))
        previous_output_at = chunk.at
        record.e2el_ms = _ms(chunk.at, raw.sent_at)
    record.text = "".join(pieces)
    record.content = "".join(answer)
    record.reasoning = "".join(reasoning)
    return record
