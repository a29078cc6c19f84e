"""Promise: an answer that runs past a turn marker is a wrong answer, not a healthy one (rigforge/bench/chat.py).

Constructed answers (the turn markers are each chat format's own, from its published template): a model on a
template that is not its own keeps generating past the end of its turn and writes the next turn's markers.
"""

from __future__ import annotations

import pytest

from rigforge.bench import chat
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
