"""Chat probes: fixed-answer questions through /v1/chat/completions, templated by the server, as chat clients ask.

The completion probes prove the model; these prove the path every chat client takes (Open WebUI, agents, the
OpenAI SDK): the server's own chat template (no client-side templating), its turn markers, usage and
streaming, and for a reasoning model the thinking switch and where the reasoning lands. What they judge:

- every probe: the request streams and reports ``usage``; no chat-template token (``<|im_end|>``,
  ``<end_of_turn>``...) leaks into the answer: a leak means the model ran past a turn marker it does not know,
  because the served chat template is not the model's;
- ``answer`` mode (a chat-tuned model): the answer ends its turn (``finish_reason`` stop) and holds the fixed
  answer; with a reasoning parser, thinking off leaves ``reasoning`` empty, thinking on fills it and keeps
  ``</think>`` out of the answer;
- ``path`` mode (a base model, which does not answer in its chat format): everything but the answer.

``template_check`` reads the template the server applies (llama.cpp: ``/props``, ``/apply-template``) and
fails when its turn markers are not tokens of the model. Every failure that points at the template says
``WRONG_TEMPLATE``, the phrase the known failure ``chat-template-not-the-models`` matches.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from rigforge.bench.config import BenchConfig, CellKind
from rigforge.bench.sanity import CheckResult, delivery_failure
from rigforge.bench.stream import RequestRecord
from rigforge.bench.transport import get_json, request

#: Turn markers of the common chat formats (ChatML, Gemma, Llama 3, Phi, GLM, Mistral): never part of an answer.
TEMPLATE_TOKENS = ("<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>", "<|start_header_id|>",
                   "<|end_header_id|>", "<|eot_id|>", "<|endoftext|>", "<|user|>", "<|assistant|>", "<|end|>",
                   "[INST]", "[/INST]")
THINK_END = "</think>"
#: The likely cause every template failure names (and the known-failure signature's needle).
WRONG_TEMPLATE = "the served chat template is not the model's"
TEMPLATE_FIX = ("serve the model's own chat template (llama.cpp: engine.flags --chat-template; vLLM, SGLang: "
                "the checkpoint's)")
#: A turn marker in a rendered prompt: <|im_start|>, <start_of_turn>, <|eot_id|>.
MARKER = re.compile(r"<\|?[A-Za-z][A-Za-z0-9_]*\|?>")
SAMPLE_MESSAGE = [{"role": "user", "content": "Hi"}]

CHAT_TEMPLATE = "chat_template"
TEMPLATE_LEAK = "chat_template_tokens"
REASONING = "chat_reasoning"
TURN_END = "chat_turn_end"
ANSWER = "chat_answer"
EMPTY = "empty_output"

#: Room for the answer: a base model only shows the path, a chat model answers in a few words, a thinking
#: model reasons first (Qwen3.5 thinks a few hundred tokens on these questions).
MAX_TOKENS = {"path": 32, "answer": 128, "thinking": 2048}


@dataclass(frozen=True)
class ChatProbe:
    """A question with one right answer; ``pattern`` must be found in the answer (``content``)."""

    name: str
    question: str
    pattern: str


CHAT_PROBES = (
    ChatProbe("chat_capital", "What is the capital of France? Answer in one word.", r"\bparis\b"),
    ChatProbe("chat_arithmetic", "What is 2 + 2? Answer with the number only.", r"\b4\b"),
)


def thinking_modes(config: BenchConfig) -> tuple[bool | None, ...]:
    """Off and on where the engine splits reasoning out; otherwise the template's default only."""
    return (False, True) if config.reasoning_parser else (None,)


def probe_name(probe: ChatProbe, thinking: bool | None) -> str:
    """``chat_capital``, ``chat_capital_thinking_off``, ``chat_capital_thinking_on``."""
    return probe.name if thinking is None else f"{probe.name}_thinking_{'on' if thinking else 'off'}"


def max_tokens(mode: str, thinking: bool | None) -> int:
    """How many tokens a probe may take (a thinking answer needs room for its reasoning)."""
    return MAX_TOKENS["thinking"] if thinking else MAX_TOKENS[mode]


def leaked_tokens(text: str) -> list[str]:
    """The chat-template tokens found in generated text, in TEMPLATE_TOKENS order."""
    return [token for token in TEMPLATE_TOKENS if token in text]


def leak_detail(leaked: list[str], text: str) -> str:
    """One line: what leaked, the likely cause, the fix."""
    return (f"{TEMPLATE_LEAK}: chat-template tokens {', '.join(leaked)} in the answer: {WRONG_TEMPLATE}; "
            f"fix: {TEMPLATE_FIX}; answer {text[:80]!r}")


def _reasoning_failure(record: RequestRecord, thinking: bool | None, reasoning_parser: bool) -> str | None:
    """What is wrong with where the reasoning went, or None."""
    if reasoning_parser and THINK_END in record.content:
        return (f"{REASONING}: {THINK_END} in the answer: the engine's reasoning parser did not split the reasoning "
                "out (check --reasoning-parser against the model)")
    if thinking is True and reasoning_parser and not record.reasoning.strip():
        return (f"{REASONING}: thinking on, but no reasoning came back in reasoning_content or reasoning "
                "(the engine runs a reasoning parser: is it the model's?)")
    if thinking is False and record.reasoning.strip():
        return (f"{REASONING}: thinking off (chat_template_kwargs enable_thinking false), yet "
                f"{len(record.reasoning)} characters of reasoning came back: the template ignored the switch")
    return None


def judge_chat(probe: ChatProbe, thinking: bool | None, record: RequestRecord, mode: str,
               reasoning_parser: bool) -> CheckResult:
    """The verdict of one chat probe on its streamed answer (see the module docstring).

    + thinking: the switch sent (None: none sent)
    + mode: ``answer`` (judge the answer) or ``path`` (a base model: everything but the answer)
    + reasoning_parser: the engine splits reasoning into ``reasoning_content``/``reasoning``

    Example: ``judge_chat(CHAT_PROBES[0], None, record, "path", False).passed``
    """
    name = probe_name(probe, thinking)
    broken = delivery_failure(record)
    if broken is not None:
        return CheckResult(name, False, f"{broken.name}: {broken.detail}")
    leaked = leaked_tokens(record.content + record.reasoning)
    if leaked:
        return CheckResult(name, False, leak_detail(leaked, record.text))
    wrong = _reasoning_failure(record, thinking, reasoning_parser)
    if wrong is not None:
        return CheckResult(name, False, wrong)
    tokens = f"{record.completion_tokens} tokens in {record.output_chunks} chunks, finish {record.finish_reason}"
    if mode == "path":
        if record.finish_reason not in ("stop", "length"):
            return CheckResult(name, False, f"{TURN_END}: the answer ended with finish_reason {record.finish_reason!r}")
        return CheckResult(name, True, f"chat path ok ({tokens}); a base model's answer is not judged: "
                                       f"{record.content[:80]!r}")
    if not record.content.strip():
        return CheckResult(name, False, f"{EMPTY}: no answer in content ({tokens}; {len(record.reasoning)} "
                                        "characters of reasoning)")
    if record.finish_reason != "stop":
        return CheckResult(name, False, f"{TURN_END}: the answer did not end its turn ({tokens}): "
                                        f"{record.content[:100]!r}")
    if re.search(probe.pattern, record.content, re.IGNORECASE) is None:
        return CheckResult(name, False, f"{ANSWER}: {probe.question!r} -> {record.content[:120]!r}")
    reasoning = f"; {len(record.reasoning)} characters of reasoning" if record.reasoning else ""
    return CheckResult(name, True, f"{probe.question!r} -> {record.content[:120]!r} ({tokens}{reasoning})")


Sender = Callable[[CellKind, str, int], RequestRecord]  # (kind, question, max_tokens) -> record


def run_chat_probes(config: BenchConfig, send: Sender) -> list[CheckResult]:
    """Every chat probe in every thinking mode the engine offers; none when ``chat_probes`` is off."""
    if config.chat_probes == "off":
        return []
    results = []
    for thinking in thinking_modes(config):
        for probe in CHAT_PROBES:
            record = send(CellKind("chat", thinking), probe.question, max_tokens(config.chat_probes, thinking))
            results.append(judge_chat(probe, thinking, record, config.chat_probes, config.reasoning_parser))
    return results


@dataclass(frozen=True)
class ServedTemplate:
    """What the server says of its chat template: its source (``/props``) and the prompt it renders for "Hi"."""

    source: str | None
    rendered: str | None


def served_template(config: BenchConfig) -> ServedTemplate:
    """The template as llama.cpp shows it; both None on an engine that shows neither (vLLM, SGLang)."""
    props = get_json(config.root_url, "/props", config.request_timeout_s)
    source = props.get("chat_template") if isinstance(props, dict) else None
    status, text = request(config.root_url, "POST", "/apply-template", {"messages": SAMPLE_MESSAGE},
                           config.request_timeout_s)
    rendered = None
    if status == 200:
        try:
            rendered = json.loads(text).get("prompt")
        except (ValueError, AttributeError):
            rendered = None
    return ServedTemplate(source if isinstance(source, str) else None, rendered if isinstance(rendered, str) else None)


def template_check(template: ServedTemplate, count: Callable[[str], int | None]) -> CheckResult:
    """Whether the turn markers of the rendered prompt are tokens of the model (one token each).

    + count: the server's tokenizer, special tokens parsed (``/tokenize``)

    A ChatML template served to Gemma renders ``<|im_start|>``, which Gemma's tokenizer splits into six
    pieces: the model never saw that marker, so it cannot end its turn with it.
    """
    if template.rendered is None:
        return CheckResult(CHAT_TEMPLATE, True, "the engine shows no rendered chat prompt (no /apply-template): "
                                                "the probes' answers alone show its template")
    markers = list(dict.fromkeys(MARKER.findall(template.rendered)))
    pieces = {marker: count(marker) for marker in markers}
    foreign = [f"{marker} ({pieces[marker]} tokens)" for marker in markers if pieces[marker] not in (1, None)]
    shown = f"renders {template.rendered[:120]!r}"
    if foreign:
        source = f"; /props chat_template {template.source[:40]!r}" if template.source else ""
        return CheckResult(CHAT_TEMPLATE, False,
                           f"{CHAT_TEMPLATE}: {WRONG_TEMPLATE}: its turn markers {', '.join(foreign)} are not tokens "
                           f"of the model{source}; fix: {TEMPLATE_FIX}")
    if not markers:
        return CheckResult(CHAT_TEMPLATE, True, f"the served template {shown}, with no turn markers to check")
    return CheckResult(CHAT_TEMPLATE, True, f"the served template {shown}; its turn markers "
                                            f"{', '.join(markers)} are each one token of the model")


def chat_checks(config: BenchConfig, send: Sender, count: Callable[[str], int | None]) -> tuple[
        list[CheckResult], ServedTemplate | None]:
    """The template check and the chat probes, in that order; nothing when ``chat_probes`` is off."""
    if config.chat_probes == "off":
        return [], None
    template = served_template(config)
    return [template_check(template, count), *run_chat_probes(config, send)], template


def timed_sender(config: BenchConfig, send: Callable[..., RequestRecord]) -> Sender:
    """A Sender over the client's ``send`` (greedy, streamed, free to stop)."""
    return lambda kind, question, tokens: send(config, kind, question, tokens, False, time.perf_counter())
