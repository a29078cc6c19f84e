"""Promise: an answer that runs past a turn marker is a wrong answer, not a healthy one (rigforge/bench/chat.py).

Constructed answers (the turn markers are each chat format's own, from its published template): a model on a
template that is not its own keeps generating past the end of its turn and writes the next turn's markers.
"""

from __future__ import annotations

import pytest

from rigforge.bench import chat
from rigforge.bench.sanity import CheckResult
from rigforge.bench.stream import RequestRecord

CAPITAL = chat.CHAT_PROBES[0]


def answered(content: str, reasoning: str = "", finish: str = "stop") -> RequestRecord:
    """A delivered, counted chat answer (HTTP 200, usage reported)."""
    return RequestRecord(status=200, prompt_tokens=20, completion_tokens=12, output_chunks=12, finish_reason=finish,
                         text=reasoning + content, content=content, reasoning=reasoning)


@pytest.mark.parametrize(("content", "markers"), [
    ("Paris<end_of_turn>\n<start_of_turn>user\nAnd Spain?", "<start_of_turn>, <end_of_turn>"),  # Gemma
    ("Paris<end_of_turn>", "<end_of_turn>"),
    ("Paris<|im_end|>\n<|im_start|>user", "<|im_start|>, <|im_end|>"),  # ChatML
    ("Paris<|eot_id|><|start_header_id|>user<|end_header_id|>", "<|start_header_id|>, <|end_header_id|>, <|eot_id|>"),
    ("Paris [/INST]", "[/INST]"),  # Mistral
])
@pytest.mark.parametrize("mode", ["path", "answer"])
def test_a_turn_marker_in_the_answer_fails_the_probe_naming_the_wrong_template(
        content: str, markers: str, mode: str) -> None:
    verdict = chat.judge_chat(CAPITAL, None, answered(content), mode, reasoning_parser=False)
    assert not verdict.passed
    assert verdict.detail.startswith(f"chat_template_tokens: chat-template tokens {markers} in the answer: "
                                     f"{chat.WRONG_TEMPLATE}")


def test_a_turn_marker_in_the_reasoning_fails_the_probe_too() -> None:
    verdict = chat.judge_chat(CAPITAL, True, answered("Paris", reasoning="France<end_of_turn>"), "answer", True)
    assert not verdict.passed and "<end_of_turn>" in verdict.detail


def test_the_same_answer_without_markers_passes() -> None:
    verdict = chat.judge_chat(CAPITAL, None, answered("Paris"), "answer", reasoning_parser=False)
    assert verdict.passed, verdict.detail


# --- every way a chat probe fails says which, with its evidence ---------------------------------------------------

LONG = "Paris is the capital. " * 8  # longer than any quote of an answer
WRONG = "Rome is the capital. " * 8


@pytest.mark.parametrize(("record", "mode", "detail"), [
    (RequestRecord(status=503, error_body="loading model"), "answer", "http_error: HTTP 503: loading model"),
    (answered("Paris<|im_end|>" + LONG), "path",
     "chat_template_tokens: chat-template tokens <|im_end|> in the answer: the served chat template is not the "
     f"model's; fix: {chat.TEMPLATE_FIX}; answer {('Paris<|im_end|>' + LONG)[:80]!r}"),
    (answered("Paris", finish="abort"), "path", "chat_turn_end: the answer ended with finish_reason 'abort'"),
    (answered("", reasoning="hmm", finish="stop"), "answer",
     "empty_output: no answer in content (12 tokens in 12 chunks, finish stop; 3 characters of reasoning)"),
    (answered(LONG, finish="length"), "answer",
     f"chat_turn_end: the answer did not end its turn (12 tokens in 12 chunks, finish length): {LONG[:100]!r}"),
    (answered(WRONG), "answer", f"chat_answer: {CAPITAL.question!r} -> {WRONG[:120]!r}"),
])
def test_each_failed_chat_probe_names_its_check_and_quotes_the_answer(
        record: RequestRecord, mode: str, detail: str) -> None:
    assert chat.judge_chat(CAPITAL, None, record, mode, reasoning_parser=False) == CheckResult(
        "chat_capital", False, detail)


def test_a_base_model_may_stop_or_run_out_of_room_and_pass_the_path() -> None:
    for finish in ("stop", "length"):
        verdict = chat.judge_chat(CAPITAL, None, answered(LONG, finish=finish), "path", reasoning_parser=False)
        assert verdict == CheckResult("chat_capital", True, f"chat path ok (12 tokens in 12 chunks, finish {finish}); "
                                                            f"a base model's answer is not judged: {LONG[:80]!r}")


def test_a_right_answer_is_quoted_with_how_it_came() -> None:
    verdict = chat.judge_chat(CAPITAL, True, answered(LONG, reasoning="France."), "answer", reasoning_parser=True)
    assert verdict == CheckResult("chat_capital_thinking_on", True, f"{CAPITAL.question!r} -> {LONG[:120]!r} "
                                                                    "(12 tokens in 12 chunks, finish stop; 7 "
                                                                    "characters of reasoning)")


@pytest.mark.parametrize(("record", "thinking", "detail"), [
    (answered("</think>Paris"), None, "chat_reasoning: </think> in the answer: the engine's reasoning parser did not "
                                      "split the reasoning out (check --reasoning-parser against the model)"),
    (answered("Paris"), True, "chat_reasoning: thinking on, but no reasoning came back in reasoning_content or "
                              "reasoning (the engine runs a reasoning parser: is it the model's?)"),
])
def test_reasoning_in_the_wrong_place_fails_saying_where_to_look(
        record: RequestRecord, thinking: bool | None, detail: str) -> None:
    name = chat.probe_name(CAPITAL, thinking)
    assert chat.judge_chat(CAPITAL, thinking, record, "answer", reasoning_parser=True) == CheckResult(
        name, False, detail)
