"""The bench's quality pass: per token of a fixed set of texts, the engine's top-k log-probabilities.

The controller (rigforge/quality/) sends the texts and, for a candidate, the reference's tokens; it compares
the two sides. Here only what the engine says is read, by the engine's own means:

- ``greedy`` (every engine: the decode path): each text is the prompt and ``max_tokens`` tokens are generated
  greedily, each with its top-k (llama.cpp's and vLLM's ``/v1/completions`` ``logprobs``, SGLang's ``/generate``
  ``output_top_logprobs``), so what changes only the decode path (speculative decoding, MTP, a decode attention
  kernel, CUDA graphs) is measured. With a reference, the candidate is kept on the reference's path:
  where it picks another token than the reference did, that position is recorded (its top-k given the same
  context) and generation starts again from the prompt plus the reference's tokens up to and including it
  (re-synchronisation; llama.cpp's prompt cache makes the restart cost one prompt step). At most
  ``max_resyncs`` restarts a text, so a recipe whose every token differs costs a bounded time; the rest of that
  text is then not measured (its ``measured`` count says so).
- on vLLM and SGLang, which also give prompt logprobs, each text is read teacher-forced too (vLLM
  ``prompt_logprobs``, SGLang ``logprob_start_len: 0``): sent whole as the prompt, every position after the first
  read (the prefill path), recorded as one more text, ``<id>#prefill`` (``phase: prefill``).

Config (``quality`` in the bench config; validated by ``check_quality``)::

    {"method": "greedy", "top_k": 20, "max_tokens": 32, "max_resyncs": 12, "corpus": "pd-mixed-v2",
     "texts": [{"id": "kjv-nahum-2", "text": "..."}], "reference_tokens": {"kjv-nahum-2": [506, 2369, ...]} | null}

Result: ``{"method", "top_k", "corpus", "seconds", "requests", "texts": [{"id", "phase", "prompt_ids", "steps":
[{"token", "top", "logprob"}], "resyncs": [position, …], "error": null | "why"}]}``. With a ``task_score`` block
(rigforge/bench/task_score.py: graded few-shot questions) the result has its answers under ``task_score``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from rigforge.bench.logprob_formats import (
    FormatError,
    Step,
    llama_generated_steps,
    sglang_generated_steps,
    sglang_prompt_steps,
    vllm_generated_steps,
    vllm_prompt_steps,
)
from rigforge.bench.task_score import check_task_score, run_task_score
from rigforge.bench.transport import request

METHODS = {"llama.cpp": "greedy", "vllm": "greedy", "sglang": "greedy"}
#: Engines whose prompt logprobs give a teacher-forced record of each text beside the greedy one.
PREFILL_ENGINES = ("vllm", "sglang")
PREFILL = "#prefill"
KEYS = ("engine", "method", "top_k", "max_tokens", "max_resyncs", "corpus", "texts", "reference_tokens", "task_score")
#: One request: (payload's prompt token ids, tokens to generate) -> the answer's steps.
Generate = Callable[[list[int], int], list[Step]]


def check_quality(value: Any) -> None:
    """Raise ValueError naming the field when ``quality`` cannot drive a quality pass; None is allowed (off)."""
    if value is None:
        return
    if not isinstance(value, dict) or set(value) - set(KEYS):
        raise ValueError(f"quality must be an object with keys from {list(KEYS)}, got {str(value)[:200]}")
    if value.get("engine") not in METHODS or value.get("method") != METHODS[value["engine"]]:
        raise ValueError(f"quality.engine must be one of {sorted(METHODS)} with its method {METHODS}, got "
                         f"{value.get('engine')!r} / {value.get('method')!r}")
    for name in ("top_k", "max_tokens", "max_resyncs"):
        number = value.get(name)
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise ValueError(f"quality.{name} must be a positive integer, got {number!r}")
    texts = value.get("texts")
    if not isinstance(texts, list) or not texts or not all(
            isinstance(text, dict) and isinstance(text.get("id"), str) and isinstance(text.get("text"), str)
            for text in texts):
        raise ValueError("quality.texts must be a non-empty list of {id, text}")
    reference = value.get("reference_tokens")
    if reference is not None and not (isinstance(reference, dict) and all(
            isinstance(tokens, list) and all(isinstance(token, int) for token in tokens)
            for tokens in reference.values())):
        raise ValueError("quality.reference_tokens must be null or {text id: [token ids]}")
    check_task_score(value.get("task_score"))


def _post(root_url: str, path: str, payload: dict[str, Any], timeout_s: float) -> Any:
    """POST and parse the JSON answer; FormatError with the status and the body's start otherwise."""
    status, body = request(root_url, "POST", path, payload, timeout_s)
    if status != 200:
        raise FormatError(f"{path} answered {status}: {body[:200]}")
    try:
        return json.loads(body)
    except ValueError:
        raise FormatError(f"{path} answered no JSON: {body[:200]}") from None


def tokenize(root_url: str, model: str, text: str, timeout_s: float) -> list[int]:
    """The text's token ids with the model's special start tokens (llama.cpp and vLLM field names both sent)."""
    answer = _post(root_url, "/tokenize", {"model": model, "content": text, "prompt": text, "add_special": True,
                                           "add_special_tokens": True}, timeout_s)
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(token, int) for token in tokens):
        raise FormatError(f"/tokenize gave no token ids: {str(answer)[:200]}")
    return tokens


def generator(config: Any, engine: str, top_k: int) -> Generate:
    """Greedy generation from token ids with ``top_k`` logprobs a token, by the engine's own API: llama.cpp's and
    vLLM's ``/v1/completions`` (vLLM told to name tokens by id), SGLang's ``/generate`` with ``input_ids``."""
    root, model, timeout = config.root_url, config.model, config.request_timeout_s

    def generate(prompt_ids: list[int], count: int) -> list[Step]:
        if engine == "sglang":
            payload = {"input_ids": prompt_ids, "return_logprob": True, "top_logprobs_num": top_k,
                       "sampling_params": {"max_new_tokens": count, "temperature": 0.0, "ignore_eos": True}}
            return sglang_generated_steps(_post(root, "/generate", payload, timeout), top_k)
        payload = {"model": model, "prompt": prompt_ids, "max_tokens": count, "temperature": 0.0, "logprobs": top_k,
                   "ignore_eos": True, "stream": False}
        if engine == "vllm":
            payload["return_tokens_as_token_ids"] = True
            return vllm_generated_steps(_post(root, "/v1/completions", payload, timeout), top_k)
        payload["cache_prompt"] = True
        return llama_generated_steps(_post(root, "/v1/completions", payload, timeout), top_k)

    return generate


def greedy_steps(generate: Generate, prompt_ids: list[int], reference: list[int] | None, count: int,
                 max_resyncs: int) -> tuple:
    """``(steps, resync positions, requests)``: ``count`` greedy tokens, kept on ``reference``'s path when given.

    >>> fake = lambda ids, n: [Step(t) for t in ([7, 9, 9] if len(ids) == 1 else [9])][:n]
    >>> steps, resyncs, requests = greedy_steps(fake, [1], [7, 8, 9], 3, 4)
    >>> [step.token for step in steps], resyncs, requests
    ([7, 9, 9], [1], 2)
    """
    steps: list[Step] = []
    resyncs: list[int] = []
    requests = 0
    while len(steps) < count and len(resyncs) <= max_resyncs:
        context = reference[:len(steps)] if reference is not None else [step.token for step in steps]
        answer = generate(prompt_ids + context, count - len(steps))
        requests += 1
        if not answer:
            break
        for step in answer:
            steps.append(step)
            position = len(steps) - 1
            if reference is not None and (position >= len(reference) or step.token != reference[position]):
                resyncs.append(position)
                break
        if reference is not None and len(steps) >= len(reference):
            break
    return steps, resyncs, requests


def forced_steps(config: Any, engine: str, text: str, top_k: int) -> tuple:
    """``(prompt ids, steps, requests)`` of one text sent whole, every position after the first read."""
    if engine == "sglang":
        payload = {"text": text, "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
                   "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": top_k}
        ids, steps = sglang_prompt_steps(_post(config.root_url, "/generate", payload, config.request_timeout_s),
                                         top_k)
        return ids, steps, 1
    ids = tokenize(config.root_url, config.model, text, config.request_timeout_s)
    payload = {"model": config.model, "prompt": ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": top_k}
    answer = _post(config.root_url, "/v1/completions", payload, config.request_timeout_s)
    return ids, vllm_prompt_steps(answer, ids, top_k), 2


def _record(text_id: str, phase: str) -> dict[str, Any]:
    return {"id": text_id, "phase": phase, "prompt_ids": [], "steps": [], "resyncs": [], "requests": 0,
            "error": None}


def measure_text(config: Any, quality: dict[str, Any], text: dict[str, str]) -> list[dict[str, Any]]:
    """One text's records: its greedy (decode) record, and on vLLM and SGLang its teacher-forced (prefill) one
    first; an engine error is recorded with its record (the steps then empty), never raised."""
    engine, top_k = quality["engine"], quality["top_k"]
    records: list[dict[str, Any]] = []
    ids: list[int] | None = None
    if engine in PREFILL_ENGINES:
        prefill = _record(text["id"] + PREFILL, "prefill")
        try:
            ids, steps, requests = forced_steps(config, engine, text["text"], top_k)
            prefill.update(prompt_ids=ids, steps=[step.as_dict() for step in steps], requests=requests)
        except FormatError as error:
            prefill["error"] = str(error)
        records.append(prefill)
    decode = _record(text["id"], "decode")
    try:
        ids = ids or tokenize(config.root_url, config.model, text["text"], config.request_timeout_s)
        reference = (quality.get("reference_tokens") or {}).get(text["id"])
        steps, resyncs, requests = greedy_steps(generator(config, engine, top_k), ids, reference,
                                                quality["max_tokens"], quality["max_resyncs"])
        decode.update(prompt_ids=ids, steps=[step.as_dict() for step in steps], resyncs=resyncs, requests=requests)
    except FormatError as error:
        decode["error"] = str(error)
    return records + [decode]


def run_quality(config: Any) -> dict[str, Any] | None:
    """The quality pass over every text of ``config.quality`` (None when the config has none)."""
    quality = config.quality
    if not quality:
        return None
    started = time.perf_counter()
    texts = [record for text in quality["texts"] for record in measure_text(config, quality, text)]
    result = {"engine": quality["engine"], "method": quality["method"], "top_k": quality["top_k"],
              "corpus": quality.get("corpus"), "texts": texts, "requests": sum(text["requests"] for text in texts),
              "seconds": round(time.perf_counter() - started, 3)}
    if quality.get("task_score"):
        result["task_score"] = run_task_score(config, quality["task_score"])
    return result


def quality_line(quality: dict[str, Any]) -> str:
    """The pass's progress line: ``quality: 4 texts, 128 positions, 3 re-syncs, 9 requests, 6.1 s`` (a text's
    prefill record, on vLLM and SGLang, counts as one more text)."""
    texts = quality["texts"]
    failed = [f"{text['id']}: {text['error']}" for text in texts if text["error"]]
    line = (f"quality: {len(texts)} texts, {sum(len(text['steps']) for text in texts)} positions, "
            f"{sum(len(text['resyncs']) for text in texts)} re-syncs, {quality['requests']} requests, "
            f"{quality['seconds']:.1f} s")
    tasks = quality.get("task_score")
    if tasks:
        errors = sum(1 for answer in tasks["answers"] if answer["error"])
        line += f"; task score: {tasks['requests']} questions answered in {tasks['seconds']:.1f} s" + (
            f" ({errors} failed)" if errors else "")
    return line + (f"; FAILED {failed[0][:200]}" if failed else "")
