"""Pure parts of the benchmark: sanity checks, statistics, /metrics parsing, config, prompt sizing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rigforge.bench import sanity
from rigforge.bench.config import ConfigError, config_from_dict, load_config
from rigforge.bench.prompts import NonceSource, filler_words, largest_fitting
from rigforge.bench.server_metrics import cross_check, parse_prometheus
from rigforge.bench.stats import percentile, summarize
from rigforge.bench.stream import RequestRecord, build_record
from rigforge.bench.transport import RawStream
from tests.bench_support.captured import SENT_AT, capture_text, raw_stream

# Outputs captured from xllamacpp 2026.10.11549 on 2026-11-22 (greedy, 16-32 tokens):
GEMMA_OUTPUT = " sky was blue, the water was clear, and the mountains were still. The"  # gemma-3-270m
GEMMA_LOOPING = (  # gemma-3-270m at 64 tokens: a sentence loop
    " shadows, the horizon a dark blue. The desert was a place of endless beauty, a place of endless beauty.\n\n"
    + "The desert was a place of endless beauty.\n\n" * 4
)
RANDOM_OUTPUT = (  # random-weight GGUF
    "\x01\ufffd mea\x10 quar\ufffd kR\ufffd\ufffd\x14\ufffd\ufffdu mapc harbo\ufffd y\n verq\x12 frD\ufffd"
)
LOOP_OUTPUT = " very" * 16  # oracle GGUF with succ(' very') = ' very'
MULTIBYTE_OUTPUT = " amber€ riverñ stone日 cloudΩ mapleЖ frost lumen harbor quartz meadow"  # multibyte oracle GGUF


def healthy_record(**changes: object) -> RequestRecord:
    """The captured llama.cpp completion, optionally altered."""
    record = build_record(raw_stream("llamacpp_completions_stream.txt"), SENT_AT)
    for name, value in changes.items():
        setattr(record, name, value)
    return record


def test_repetition_ratio_separates_loops_from_prose() -> None:
    assert sanity.repeated_ngram_ratio(GEMMA_OUTPUT) < 0.2
    assert sanity.repeated_ngram_ratio(MULTIBYTE_OUTPUT) == 0.0
    assert sanity.repeated_ngram_ratio(LOOP_OUTPUT) > 0.9
    assert sanity.repeated_ngram_ratio(GEMMA_LOOPING) > sanity.REPETITION_MAX_RATIO
    assert sanity.repeated_ngram_ratio("ok ok") == 0.0  # too short to judge


def test_garbage_share_counts_replacement_and_control_characters() -> None:
    assert sanity.garbage_share(RANDOM_OUTPUT) > 0.2
    assert sanity.garbage_share(GEMMA_OUTPUT) == 0.0
    assert sanity.garbage_share(MULTIBYTE_OUTPUT) == 0.0
    assert sanity.garbage_share("line one\n\tline two\r\n") == 0.0


def test_text_checks_name_the_failing_check() -> None:
    verdicts = {check.name: check for check in sanity.text_checks([GEMMA_OUTPUT, RANDOM_OUTPUT])}
    assert verdicts[sanity.REPETITION].passed
    assert not verdicts[sanity.GARBAGE].passed
    verdicts = {check.name: check for check in sanity.text_checks([GEMMA_OUTPUT, LOOP_OUTPUT])}
    assert not verdicts[sanity.REPETITION].passed and "very very" in verdicts[sanity.REPETITION].detail
    assert verdicts[sanity.GARBAGE].passed


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, None),
        ({"transport_error": "ConnectionRefusedError: [Errno 111]"}, sanity.REQUEST_ERROR),
        ({"status": 500, "error_body": "boom"}, sanity.HTTP_ERROR),
        ({"stream_errors": ["CUDA error"]}, sanity.ERROR_RESPONSE),
        ({"non_finite": True}, sanity.NAN_RESPONSE),
        ({"completion_tokens": None}, sanity.MISSING_USAGE),
        ({"text": "  "}, sanity.EMPTY_OUTPUT),
        ({"completion_tokens": 5}, sanity.OUTPUT_LENGTH),
        ({"cached_tokens": 64}, sanity.PREFIX_CACHE_HIT),
        ({"prompt_tokens": 40}, sanity.PROMPT_LENGTH),
    ],
)
def test_request_failure_names_the_check(changes: dict[str, object], expected: str | None) -> None:
    failure = sanity.request_failure(healthy_record(**changes), expected_output_tokens=8, target_prompt_tokens=13)
    assert (failure.name if failure else None) == expected


def test_real_context_overflow_400_is_named() -> None:
    body = capture_text("llamacpp_context_overflow_400.json")
    record = build_record(RawStream(sent_at=SENT_AT, status=400, body=body), SENT_AT)
    failure = sanity.request_failure(record, expected_output_tokens=4)
    assert failure is not None and failure.name == sanity.CONTEXT_OVERFLOW


def test_vllm_overflow_message_is_named_too() -> None:
    message = "This model's maximum context length is 8192 tokens."
    body = json.dumps({"object": "error", "message": message, "code": 400})
    record = RequestRecord(status=400, error_body=body)
    assert sanity.delivery_failure(record).name == sanity.CONTEXT_OVERFLOW


def test_probes_accept_the_right_answers_only() -> None:
    capital, arithmetic = sanity.PROBES
    assert capital.passes(" Paris\nQ: What is", chat=False)
    assert not capital.passes(" London", chat=False)
    assert arithmetic.passes(" 4\n\n2 + 2 =", chat=False)
    assert not arithmetic.passes(" 42", chat=False)
    assert arithmetic.passes("2 + 2 = 4.", chat=True)


def test_grouped_request_failures_count_requests() -> None:
    failures = [sanity.CheckResult(sanity.OUTPUT_LENGTH, False, "completion_tokens 3 != max_tokens 8")] * 3
    (grouped,) = sanity.summarize_request_failures(failures, total=10)
    assert grouped.name == sanity.OUTPUT_LENGTH
    assert grouped.detail.startswith("3 of 10 requests")


def test_percentiles_match_numpy_linear_interpolation() -> None:
    values = [10.0, 20.0, 30.0, 40.0, 50.0]
    assert percentile(values, 50) == 30.0
    assert percentile(values, 90) == pytest.approx(46.0)
    assert percentile(values, 99) == pytest.approx(49.6)
    assert summarize(values) == {"mean": 30.0, "median": 30.0, "p90": 46.0, "p99": 49.6}
    assert summarize([]) is None


def test_metrics_parsing_on_real_llamacpp_output() -> None:
    totals = parse_prometheus(capture_text("llamacpp_metrics.txt"))
    assert totals["llamacpp:tokens_predicted_total"] > 0
    assert "llamacpp:spec_decode_num_accepted_tokens_total" in totals


def test_metrics_sum_label_sets_and_give_spec_acceptance() -> None:
    after = parse_prometheus(capture_text("vllm_metrics_constructed.txt"))
    assert after["vllm:generation_tokens_total"] == 1234.0
    before = {name: 0.0 for name in after}
    report = cross_check(before, after, client_tokens=1234)
    assert report["tokens_match"] is True
    assert report["spec_decode_acceptance_rate"] == pytest.approx(800 / 1200, abs=1e-4)
    assert report["spec_decode_acceptance_length"] == pytest.approx(3.0)
    assert cross_check(None, after, 1)["available"] is False


def test_tensor_parallel_ranks_are_not_double_counted() -> None:
    text = (  # constructed in SGLang's exposition format: the same tokens seen by both TP ranks
        'sglang:generation_tokens_total{model_name="m",tp_rank="0"} 500.0\n'
        'sglang:generation_tokens_total{model_name="m",tp_rank="1"} 500.0\n'
        'sglang:generation_tokens_total{model_name="m",tp_rank="10"} 500.0\n'
    )
    assert parse_prometheus(text)["sglang:generation_tokens_total"] == 500.0


def test_config_loads_and_rejects_bad_fields(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    fields = {"base_url": "http://127.0.0.1:8000/v1", "model": "m", "concurrency": [1, 8], "input_tokens": [128]}
    path.write_text(json.dumps({**fields, "metadata": {"profile": "sandbox"}}))
    config = load_config(path)
    assert config.root_url == "http://127.0.0.1:8000"
    assert config.endpoint_path == "/v1/completions"
    assert config.metadata == {"profile": "sandbox"}
    with pytest.raises(ConfigError, match="unknown config keys: concurency"):
        config_from_dict({**fields, "concurency": [1]})
    with pytest.raises(ConfigError, match="concurrency"):
        config_from_dict({**fields, "concurrency": [0]})
    with pytest.raises(ConfigError, match="endpoint"):
        config_from_dict({**fields, "endpoint": "responses"})
    with pytest.raises(ConfigError, match="output_tokens"):
        config_from_dict({**fields, "output_tokens": 1})
    with pytest.raises(ConfigError, match="missing config keys: model"):
        config_from_dict({"base_url": "http://127.0.0.1:8000"})


def test_nonces_differ_from_the_first_character_on() -> None:
    nonces = NonceSource(seed=1)
    prefixes = [nonces.next_prefix() for _ in range(200)]
    assert len(set(prefixes)) == 200
    assert len({len(prefix) for prefix in prefixes}) == 1
    assert len({prefix[0] for prefix in prefixes}) >= 8  # no shared leading run for a prefix cache to reuse
    assert NonceSource(seed=2).prefix(0) != NonceSource(seed=1).prefix(0)


def test_largest_fitting_bisects_on_the_counter() -> None:
    words = filler_words(500)
    assert len(words) >= 500

    def count(text: str) -> int:  # stand-in tokenizer: one token per word (the engine tests use a real one)
        return len(text.split())

    assert largest_fitting(words, "123. ", 100, count) == 99
    assert largest_fitting(words, "123. ", 100, lambda text: None) is None


def test_extra_cells_are_checked_by_the_client() -> None:
    fields = {"base_url": "http://127.0.0.1:8000", "model": "m"}
    good = {"endpoint": "chat", "thinking": False, "concurrency": [1], "input_tokens": [128]}
    assert config_from_dict({**fields, "extra_cells": [good]}).cell_grids()[1][0].label == "chat, thinking off"
    for bad, message in ((dict(good, endpoint="responses"), r"extra_cells\[0\]\.endpoint"),
                         (dict(good, endpoint="completions"), "only for chat"),
                         (dict(good, concurrency=[0]), r"extra_cells\[0\]\.concurrency"),
                         (dict(good, seconds=5), "keys from")):
        with pytest.raises(ConfigError, match=message):
            config_from_dict({**fields, "extra_cells": [bad]})
    with pytest.raises(ConfigError, match="chat_probes must be one of"):
        config_from_dict({**fields, "chat_probes": "all"})
