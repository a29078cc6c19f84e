"""Stream parsing on real llama.cpp captures (and a constructed vLLM one): tokens from usage, never chunks."""

from __future__ import annotations

import pytest

from rigforge.bench.stream import build_record, has_non_finite, parse_line
from rigforge.bench.transport import RawStream
from tests.bench_support.captured import SENT_AT, capture_text, raw_stream


def test_llamacpp_completions_usage_in_finish_chunk() -> None:
    record = build_record(raw_stream("llamacpp_completions_stream.txt"), cell_origin=SENT_AT)
    assert record.completion_tokens == 8
    assert record.prompt_tokens == 13
    assert record.cached_tokens == 0
    assert record.finish_reason == "length"
    assert record.text.startswith(" Paris")
    assert record.output_chunks == 8  # the finish chunk carries usage but no text
    assert record.events == 9
    assert record.server_decode_tps is not None and record.server_decode_tps > 0
    assert record.server_predicted_n == 8


def test_times_come_from_text_chunks() -> None:
    record = build_record(raw_stream("llamacpp_completions_stream.txt", first_after_s=0.2, gap_s=0.01), SENT_AT)
    assert record.ttft_ms == pytest.approx(200.0)
    assert record.first_event_ms == pytest.approx(200.0)
    assert record.e2el_ms == pytest.approx(270.0)  # the 8th text chunk; the usage-only finish chunk is excluded
    assert record.itls_ms == pytest.approx([10.0] * 7)
    assert record.tpot_ms == pytest.approx(70.0 / 7)


def test_llamacpp_chat_role_chunk_is_not_a_token_and_usage_chunk_has_no_choices() -> None:
    record = build_record(raw_stream("llamacpp_chat_stream.txt", first_after_s=0.1, gap_s=0.01), SENT_AT)
    assert record.completion_tokens == 6
    assert record.prompt_tokens == 29
    assert record.first_event_ms == pytest.approx(100.0)  # role-only chunk
    assert record.ttft_ms == pytest.approx(110.0)  # first chunk with content
    assert record.output_chunks == 6
    assert record.finish_reason == "length"
    assert "capital" in record.text


def test_multibyte_stream_has_fewer_chunks_than_tokens() -> None:
    record = build_record(raw_stream("llamacpp_multibyte_stream.txt"), SENT_AT)
    assert record.completion_tokens == 12
    assert record.output_chunks == 7
    assert len(record.itls_ms) == record.output_chunks - 1
    # TPOT divides by tokens - 1 from usage, not by the number of gaps between chunks
    assert record.tpot_ms == pytest.approx((record.e2el_ms - record.ttft_ms) / 11)


def test_vllm_separate_usage_chunk_and_multi_token_chunks() -> None:
    record = build_record(raw_stream("vllm_completions_stream_constructed.txt"), SENT_AT)
    assert record.completion_tokens == 8
    assert record.output_chunks == 4
    assert record.cached_tokens is None  # prompt_tokens_details: null
    assert record.text == " Paris. It is the largest city in"


def test_http_400_body_is_kept() -> None:
    body = capture_text("llamacpp_context_overflow_400.json")
    record = build_record(RawStream(sent_at=SENT_AT, status=400, body=body), SENT_AT)
    assert record.status == 400
    assert "exceeds the available context size" in record.error_body
    assert record.completion_tokens is None


def test_error_events_and_nan_are_flagged() -> None:
    lines = [
        (SENT_AT + 0.1, 'data: {"choices":[{"text":"a","index":0}],"usage":null}'),
        (SENT_AT + 0.2, 'data: {"error":{"message":"CUDA error: an illegal memory access","code":500}}'),
        (SENT_AT + 0.3, 'error: {"message": "slot crashed"}'),
    ]
    record = build_record(RawStream(sent_at=SENT_AT, status=200, lines=lines), SENT_AT)
    assert record.stream_errors == ["CUDA error: an illegal memory access", '{"message": "slot crashed"}']
    nan_line = 'data: {"choices":[{"text":"x","index":0}],"usage":{"completion_tokens":1,"prompt_tokens":NaN}}'
    chunk = parse_line(nan_line, SENT_AT)
    assert chunk is not None and chunk.non_finite


def test_parse_line_ignores_done_comments_and_other_fields() -> None:
    assert parse_line("data: [DONE]", 1.0) is None
    assert parse_line(": ping", 1.0) is None
    assert parse_line("event: message", 1.0) is None
    broken = parse_line("data: {not json", 1.0)
    assert broken is not None and broken.error is not None


def test_has_non_finite_walks_nested_values() -> None:
    assert has_non_finite({"a": [1, {"b": float("inf")}]})
    assert not has_non_finite({"a": [1, {"b": 2.5}], "c": None})
