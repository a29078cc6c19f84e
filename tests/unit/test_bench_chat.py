"""The chat probes' judging, on recorded answers (tests/bench_support/captures/README.md says where each is from).

Real: llama.cpp (xllamacpp) serving the sandbox's base Gemma 3 270M with its own template and with ChatML forced
on it. Constructed (no GPU engine runs here): Qwen3.5 answers as vLLM and SGLang document their reasoning
streams, thinking on and off.
"""

from __future__ import annotations

import json

import pytest

from rigforge.bench import chat
from rigforge.bench.client import build_payload
from rigforge.bench.config import CellKind, config_from_dict
from rigforge.bench.stream import RequestRecord, build_record
from tests.bench_support.captured import SENT_AT, capture_text, raw_stream

CAPITAL, ARITHMETIC = chat.CHAT_PROBES
TEMPLATES = json.loads(capture_text("llamacpp_chat_template_props.json"))


def record(name: str) -> RequestRecord:
    return build_record(raw_stream(name), SENT_AT)


def test_a_base_model_on_its_own_template_passes_the_path_but_would_fail_an_answer() -> None:
    answer = record("llamacpp_chat_gemma_template_stream.txt")
    assert "szpital" in answer.content and answer.finish_reason == "length" and answer.reasoning == ""
    path = chat.judge_chat(CAPITAL, None, answer, "path", reasoning_parser=False)
    assert path.passed and path.name == "chat_capital"
    assert path.detail.startswith("chat path ok (32 tokens in 32 chunks, finish length); a base model's answer is not")
    judged = chat.judge_chat(CAPITAL, None, answer, "answer", reasoning_parser=False)
    assert not judged.passed and judged.detail.startswith("chat_turn_end: the answer did not end its turn")


@pytest.mark.parametrize("mode", ["path", "answer"])
def test_chatml_forced_on_gemma_leaks_its_turn_markers_with_the_likely_cause(mode: str) -> None:
    answer = record("llamacpp_chat_chatml_leak_stream.txt")
    verdict = chat.judge_chat(CAPITAL, None, answer, mode, reasoning_parser=False)
    assert not verdict.passed
    assert verdict.detail.startswith("chat_template_tokens: chat-template tokens <|im_start|>, <|im_end|> in the "
                                     "answer: the served chat template is not the model's; fix: serve the model's "
                                     "own chat template (llama.cpp: engine.flags --chat-template")
    assert "\n" not in verdict.detail  # one line, for the journal and the known-failure matcher


def test_vllm_thinking_on_answer_with_reasoning_in_its_own_field_passes() -> None:
    answer = record("vllm_chat_thinking_on_constructed.txt")
    assert answer.reasoning.startswith("The user asks") and answer.content == "\n\nParis."
    verdict = chat.judge_chat(CAPITAL, True, answer, "answer", reasoning_parser=True)
    assert verdict.passed and verdict.name == "chat_capital_thinking_on"
    assert verdict.detail.endswith("(22 tokens in 5 chunks, finish stop; 68 characters of reasoning)")


def test_sglang_thinking_on_answer_in_reasoning_content_passes() -> None:
    answer = record("sglang_chat_thinking_on_constructed.txt")
    assert answer.reasoning == "Two plus two is four.\n" and answer.completion_tokens == 13
    assert chat.judge_chat(ARITHMETIC, True, answer, "answer", reasoning_parser=True).passed


def test_thinking_off_answers_in_content_alone() -> None:
    answer = record("vllm_chat_thinking_off_constructed.txt")
    verdict = chat.judge_chat(CAPITAL, False, answer, "answer", reasoning_parser=True)
    assert verdict.passed and verdict.name == "chat_capital_thinking_off"
    assert verdict.detail == ("'What is the capital of France? Answer in one word.' -> 'Paris.' "
                              "(3 tokens in 2 chunks, finish stop)")


def test_a_thinking_switch_the_server_ignored_fails_either_way() -> None:
    reasoned = chat.judge_chat(CAPITAL, False, record("vllm_chat_thinking_on_constructed.txt"), "answer", True)
    assert not reasoned.passed and reasoned.detail.startswith(
        "chat_reasoning: thinking off (chat_template_kwargs enable_thinking false), yet 68 characters of reasoning")
    silent = chat.judge_chat(CAPITAL, True, record("vllm_chat_thinking_off_constructed.txt"), "answer", True)
    assert not silent.passed and silent.detail.startswith("chat_reasoning: thinking on, but no reasoning came back")


def test_reasoning_a_parser_did_not_split_out_fails() -> None:
    verdict = chat.judge_chat(CAPITAL, True, record("vllm_chat_unsplit_reasoning_constructed.txt"), "answer", True)
    assert not verdict.passed
    assert verdict.detail.startswith("chat_reasoning: </think> in the answer: the engine's reasoning parser did not")


def test_a_wrong_answer_and_a_missing_answer_fail_by_name() -> None:
    wrong = chat.judge_chat(ARITHMETIC, False, record("vllm_chat_thinking_off_constructed.txt"), "answer", True)
    assert not wrong.passed and wrong.detail.startswith("chat_answer: 'What is 2 + 2? Answer with the number only.'")
    empty = RequestRecord(status=200, prompt_tokens=20, completion_tokens=2048, finish_reason="length",
                          reasoning="Let me think." * 10, output_chunks=300)
    verdict = chat.judge_chat(CAPITAL, True, empty, "answer", reasoning_parser=True)
    assert not verdict.passed and verdict.detail.startswith("empty_output: no answer in content (2048 tokens")


def test_a_request_that_failed_or_lost_its_usage_fails_the_probe_in_either_mode() -> None:
    refused = RequestRecord(status=400, error_body='{"error": "chat_template_kwargs not supported"}')
    assert chat.judge_chat(CAPITAL, None, refused, "path", False).detail.startswith("http_error: HTTP 400")
    counted = build_record(raw_stream("llamacpp_chat_gemma_template_stream.txt"), SENT_AT)
    counted.completion_tokens = None
    assert chat.judge_chat(CAPITAL, None, counted, "path", False).detail.startswith("missing_usage")


def test_the_template_check_on_the_real_served_templates() -> None:
    def counter(name: str):
        return lambda marker: TEMPLATES[name]["tokenize_counts"][marker]

    def served(name: str) -> chat.ServedTemplate:
        return chat.ServedTemplate(TEMPLATES[name]["props_chat_template"], TEMPLATES[name]["apply_template_prompt"])

    own = chat.template_check(served("gemma"), counter("gemma"))
    assert own.passed and own.detail.endswith("its turn markers <start_of_turn>, <end_of_turn> are each one token "
                                              "of the model")
    chatml = chat.template_check(served("chatml"), counter("chatml"))
    assert not chatml.passed
    assert chatml.detail.startswith("chat_template: the served chat template is not the model's: its turn markers "
                                    "<|im_start|> (6 tokens), <|im_end|> (6 tokens) are not tokens of the model")
    unseen = chat.template_check(chat.ServedTemplate(None, None), counter("gemma"))
    assert unseen.passed and "no /apply-template" in unseen.detail


def test_probes_run_off_and_on_only_where_the_engine_splits_reasoning() -> None:
    sent: list[tuple[CellKind, int]] = []

    def send(kind: CellKind, question: str, tokens: int) -> RequestRecord:
        sent.append((kind, tokens))
        return record("vllm_chat_thinking_off_constructed.txt")

    base = {"base_url": "http://127.0.0.1:8000", "model": "m"}
    assert chat.run_chat_probes(config_from_dict(base), send) == []  # chat_probes defaults to off
    results = chat.run_chat_probes(config_from_dict({**base, "chat_probes": "answer", "reasoning_parser": True}), send)
    assert [result.name for result in results] == ["chat_capital_thinking_off", "chat_arithmetic_thinking_off",
                                                   "chat_capital_thinking_on", "chat_arithmetic_thinking_on"]
    assert sent == [(CellKind("chat", False), 128)] * 2 + [(CellKind("chat", True), 2048)] * 2
    sent.clear()
    chat.run_chat_probes(config_from_dict({**base, "chat_probes": "path"}), send)
    assert sent == [(CellKind("chat"), 32)] * 2


def test_the_request_carries_the_thinking_switch_only_when_set() -> None:
    config = config_from_dict({"base_url": "http://127.0.0.1:8000", "model": "m"})
    on = build_payload(config, CellKind("chat", True), "q", 8, fixed_length=True)
    assert on["messages"] == [{"role": "user", "content": "q"}] and "prompt" not in on
    assert on["chat_template_kwargs"] == {"enable_thinking": True} and on["ignore_eos"] is True
    plain = build_payload(config, CellKind("chat"), "q", 8, fixed_length=False)
    assert "chat_template_kwargs" not in plain and "ignore_eos" not in plain
    assert build_payload(config, CellKind(), "q", 8, False)["prompt"] == "q"
