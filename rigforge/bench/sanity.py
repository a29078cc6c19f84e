"""Sanity checks that fail a run by name instead of letting a broken server produce numbers.

Request checks (every request): transport and HTTP errors, context overflow (HTTP 400),
error or NaN in the stream, missing ``usage``, empty output, output length != requested,
prefix-cache hits, prompt length off target. Text checks (each cell's outputs): repetition
and garbage. Probes (once per run): fixed-answer prompts decoded greedily.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rigforge.bench.stream import RequestRecord

REQUEST_ERROR = "request_error"
HTTP_ERROR = "http_error"
CONTEXT_OVERFLOW = "context_overflow"
ERROR_RESPONSE = "error_response"
NAN_RESPONSE = "nan_response"
MISSING_USAGE = "missing_usage"
EMPTY_OUTPUT = "empty_output"
OUTPUT_LENGTH = "output_length"
PREFIX_CACHE_HIT = "prefix_cache_hit"
PROMPT_LENGTH = "prompt_length"
REPETITION = "repetition"
GARBAGE = "garbage"

# One KV block of vLLM's default size (16) may be shared through a chat template's fixed
# prefix even with a unique nonce; anything beyond that means the prompt was served from cache.
MAX_CACHED_TOKENS = 16
REPETITION_NGRAM_CHARS = 16
REPETITION_MAX_RATIO = 0.5
# Judge the head of each output only: with ignore_eos a healthy model may wander after the
# point where it would have stopped, and that tail says nothing about its health.
REPETITION_WINDOW_CHARS = 1000
GARBAGE_MAX_SHARE = 0.05
CONTEXT_OVERFLOW_PATTERN = re.compile(r"context|too long|exceed|max_model_len|longer than|maximum", re.IGNORECASE)


@dataclass(frozen=True)
class CheckResult:
    """One named check with its verdict and the evidence."""

    name: str
    passed: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def prompt_tolerance(target_tokens: int) -> int:
    """How far ``usage.prompt_tokens`` may stray from the target (nonce digits tokenize unevenly)."""
    return max(8, target_tokens // 20)


def delivery_failure(record: RequestRecord) -> CheckResult | None:
    """Whether the request failed to deliver a well-formed, counted answer (errors, NaN, no usage)."""
    if record.transport_error:
        return CheckResult(REQUEST_ERROR, False, record.transport_error)
    if record.status == 400 and CONTEXT_OVERFLOW_PATTERN.search(record.error_body):
        return CheckResult(CONTEXT_OVERFLOW, False, f"HTTP 400: {record.error_body[:300]}")
    if record.status != 200:
        return CheckResult(HTTP_ERROR, False, f"HTTP {record.status}: {record.error_body[:300]}")
    if record.stream_errors:
        return CheckResult(ERROR_RESPONSE, False, record.stream_errors[0])
    if record.non_finite:
        return CheckResult(NAN_RESPONSE, False, "NaN or infinity in a streamed event")
    if record.completion_tokens is None or record.prompt_tokens is None:
        return CheckResult(MISSING_USAGE, False, "no usage with prompt_tokens and completion_tokens in the stream")
    return None


def request_failure(
    record: RequestRecord, expected_output_tokens: int | None, target_prompt_tokens: int | None = None
) -> CheckResult | None:
    """The first check this request fails, or None when it is fit to measure."""
    broken = delivery_failure(record)
    if broken is not None:
        return broken
    if not record.text.strip():
        return CheckResult(EMPTY_OUTPUT, False, f"no text in {record.events} events")
    if expected_output_tokens is not None and record.completion_tokens != expected_output_tokens:
        detail = f"completion_tokens {record.completion_tokens} != max_tokens {expected_output_tokens}"
        return CheckResult(OUTPUT_LENGTH, False, detail + " (is ignore_eos honoured?)")
    if record.cached_tokens is not None and record.cached_tokens > MAX_CACHED_TOKENS:
        return CheckResult(PREFIX_CACHE_HIT, False, f"cached_tokens {record.cached_tokens} > {MAX_CACHED_TOKENS}")
    if target_prompt_tokens is not None:
        off_by = abs(record.prompt_tokens - target_prompt_tokens)
        if off_by > prompt_tolerance(target_prompt_tokens):
            detail = f"prompt_tokens {record.prompt_tokens} vs target {target_prompt_tokens}"
            return CheckResult(PROMPT_LENGTH, False, detail)
    return None


def repeated_ngram_ratio(text: str, size: int = REPETITION_NGRAM_CHARS) -> float:
    """Share of character n-grams that repeat an earlier one: 0 for fresh text, near 1 for a loop.

    Characters rather than words so that text without spaces (CJK, code) is judged too.
    """
    head = text[:REPETITION_WINDOW_CHARS]
    total = len(head) - size + 1
    if total < size:
        return 0.0  # too short to tell a loop from a phrase
    distinct = len({head[start : start + size] for start in range(total)})
    return 1.0 - distinct / total


def garbage_share(text: str) -> float:
    """Share of characters that are U+FFFD (undecodable bytes) or control characters other than whitespace."""
    if not text:
        return 0.0
    bad = sum(1 for char in text if char == "\ufffd" or (unicodedata.category(char) == "Cc" and char not in "\n\r\t"))
    return bad / len(text)


def _worst(texts: Sequence[str], score: Any) -> tuple[float, str]:
    """The highest score over the texts and the text that got it."""
    scored = [(score(text), text) for text in texts]
    return max(scored, key=lambda pair: pair[0]) if scored else (0.0, "")


def text_checks(texts: Sequence[str]) -> list[CheckResult]:
    """Repetition and garbage verdicts over a cell's output texts (the worst text decides)."""
    ratio, looping = _worst(texts, repeated_ngram_ratio)
    share, garbled = _worst(texts, garbage_share)
    return [
        CheckResult(
            REPETITION,
            ratio <= REPETITION_MAX_RATIO,
            f"worst repeated {REPETITION_NGRAM_CHARS}-gram ratio {ratio:.2f} (max {REPETITION_MAX_RATIO}) "
            f"in {len(texts)} outputs: {looping[:120]!r}",
        ),
        CheckResult(
            GARBAGE,
            share <= GARBAGE_MAX_SHARE,
            f"worst U+FFFD/control share {share:.2f} (max {GARBAGE_MAX_SHARE}) "
            f"in {len(texts)} outputs: {garbled[:120]!r}",
        ),
    ]


def summarize_request_failures(failures: Iterable[CheckResult], total: int) -> list[CheckResult]:
    """One failed CheckResult per check name, with how many requests failed it and the first detail."""
    grouped: dict[str, list[CheckResult]] = {}
    for failure in failures:
        grouped.setdefault(failure.name, []).append(failure)
    return [
        CheckResult(name, False, f"{len(items)} of {total} requests: {items[0].detail}")
        for name, items in grouped.items()
    ]


@dataclass(frozen=True)
class Probe:
    """A prompt with one right answer; greedy decoding of a healthy model must match ``pattern``."""

    name: str
    prompt: str
    max_tokens: int
    pattern: str
    chat_pattern: str

    def passes(self, text: str, chat: bool) -> bool:
        """True when the generated text holds the expected answer."""
        pattern = self.chat_pattern if chat else self.pattern
        return re.search(pattern, text, re.IGNORECASE) is not None


PROBES = (
    Probe("probe_capital", "Q: What is the capital of France?\nA:", 16, r"paris", r"paris"),
    # One worked line before the question: SmolLM2-135M-Instruct continues a bare "2 + 2 =" with " 3 + 2 = 5", and
    # with it answers " 4" as Gemma 3 270M does (measured on xllamacpp 2026.10.11549).
    Probe("probe_arithmetic", "1 + 1 = 2\n2 + 2 =", 8, r"^\s*4\b", r"\b4\b"),
)
