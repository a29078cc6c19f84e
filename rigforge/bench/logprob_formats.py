"""Each engine's log-probability answer, read into one shape: per position the token there and the top-k.

A ``Step`` is one position: ``token`` (the token id at that position: the one the engine chose when it
generated, the text's own token when it was forced), ``top`` (``[token id, logprob]`` pairs, most likely first,
at most k) and ``token_logprob`` (the position's token's own logprob where the engine said it, else None).

The answers (fixtures in tests/fixtures/quality/ say where each was captured or quoted):

- llama.cpp ``/v1/completions`` with ``logprobs: k``: ``choices[0].logprobs.content`` is a list of
  ``{id, token, bytes, logprob, top_logprobs: [{id, token, bytes, logprob}]}`` for the generated tokens only
  (llama.cpp has no prompt logprobs: ``echo`` is ignored).
- vLLM ``/v1/completions`` with ``logprobs: k`` and ``return_tokens_as_token_ids: true`` (generated tokens):
  ``choices[0].logprobs`` is OpenAI's legacy form, ``{tokens, token_logprobs, top_logprobs, text_offset}``, each
  token written ``"token_id:<id>"`` and each ``top_logprobs`` entry ``{"token_id:<id>": logprob}`` (the k best and
  the chosen token; vllm/entrypoints/openai/serving_completion.py's ``_create_completion_logprobs``).
- SGLang ``/generate`` with ``return_logprob`` and ``top_logprobs_num: k`` (generated tokens):
  ``meta_info.output_token_logprobs`` is ``[[logprob, id, text or null], …]`` and ``meta_info.output_top_logprobs``
  ``[[[logprob, id, text or null], …] or null, …]`` (python/sglang/srt/managers/tokenizer_manager.py's
  ``detokenize_logprob_tokens``).
- vLLM ``/v1/completions`` with ``prompt_logprobs: k``: ``choices[0].prompt_logprobs`` has one entry per prompt
  token, None for the first, else ``{"<token id>": {logprob, rank, decoded_token}}``: the top-k and, when it is not
  among them, the prompt's own token (so which token was there comes from the prompt's ids, not the answer).
- SGLang ``/generate`` with ``return_logprob``, ``logprob_start_len: 0``, ``top_logprobs_num: k``:
  ``meta_info.input_token_logprobs`` is ``[[logprob, id, text], …]`` (the first logprob null) and
  ``meta_info.input_top_logprobs`` is ``[null, [[logprob, id, text], …], …]``.

Example::

    steps = llama_generated_steps(json.loads(body), top_k=8)
    steps[0].token, steps[0].top[0]           # (506, [506, -1.95])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class FormatError(ValueError):
    """The engine's answer does not hold the log-probabilities asked for."""


@dataclass
class Step:
    """One position: the token there, the engine's top-k (id, logprob; most likely first) and its own logprob."""

    token: int
    top: list[list[float]] = field(default_factory=list)
    token_logprob: float | None = None
    text: str | None = None  # the token's text, where the engine said it (reports quote it)

    def as_dict(self) -> dict:
        """The JSON form in a bench result: ``{"token": id, "top": [[id, logprob], …], "logprob": x, "text": s}``."""
        return {"token": self.token, "top": self.top, "logprob": self.token_logprob, "text": self.text}


def _top(pairs: Any, top_k: int) -> list[list[float]]:
    """``[[id, logprob], …]`` sorted most likely first, at most ``top_k``, skipping entries without a number."""
    kept = [[int(token), float(logprob)] for token, logprob in pairs
            if isinstance(token, int) and isinstance(logprob, (int, float))]
    kept.sort(key=lambda pair: -pair[1])
    return kept[:top_k]


def llama_generated_steps(answer: Any, top_k: int) -> list[Step]:
    """The generated tokens of a llama.cpp completion answer (non-streaming), with their top-k."""
    try:
        content = answer["choices"][0]["logprobs"]["content"]
    except (KeyError, IndexError, TypeError):
        raise FormatError("no choices[0].logprobs.content in the answer (was logprobs sent?)") from None
    steps = []
    for entry in content or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), int):
            raise FormatError(f"a logprobs entry without a token id: {str(entry)[:120]}")
        pairs = [(item.get("id"), item.get("logprob")) for item in entry.get("top_logprobs") or []
                 if isinstance(item, dict)]
        steps.append(Step(entry["id"], _top(pairs, top_k), entry.get("logprob"), entry.get("token")))
    return steps


def _vllm_token_id(name: Any) -> int:
    """``"token_id:506"`` -> 506 (vLLM's ``return_tokens_as_token_ids`` form); FormatError for anything else."""
    prefix, _, number = str(name).partition(":")
    if prefix != "token_id" or not number.lstrip("-").isdigit():
        raise FormatError(f"a token {str(name)[:40]!r} not written as token_id:<id> (was return_tokens_as_token_ids "
                          "sent?)")
    return int(number)


def vllm_generated_steps(answer: Any, top_k: int) -> list[Step]:
    """The generated tokens of a vLLM completion answer (``logprobs: k``, ``return_tokens_as_token_ids``)."""
    try:
        logprobs = answer["choices"][0]["logprobs"]
        tokens, own, tops = logprobs["tokens"], logprobs["token_logprobs"], logprobs["top_logprobs"]
    except (KeyError, IndexError, TypeError):
        raise FormatError("no choices[0].logprobs with tokens, token_logprobs, top_logprobs (was logprobs "
                          "sent?)") from None
    if not isinstance(tokens, list) or not isinstance(own, list) or not isinstance(tops, list) or \
            not len(tokens) == len(own) == len(tops):
        raise FormatError("logprobs.tokens, token_logprobs and top_logprobs differ in length")
    steps = []
    for index in range(len(tokens)):  # lengths checked above (zip's strict= is not in Python 3.9)
        name, logprob, top = tokens[index], own[index], tops[index]
        pairs = [(_vllm_token_id(key), value) for key, value in (top or {}).items()]
        steps.append(Step(_vllm_token_id(name), _top(pairs, top_k), logprob if isinstance(logprob, (int, float))
                          else None))
    return steps


def sglang_generated_steps(answer: Any, top_k: int) -> list[Step]:
    """The generated tokens of an SGLang ``/generate`` answer with ``return_logprob`` and ``top_logprobs_num``."""
    try:
        meta = answer["meta_info"]
        tokens, tops = meta["output_token_logprobs"], meta["output_top_logprobs"]
    except (KeyError, TypeError):
        raise FormatError("no meta_info.output_token_logprobs / output_top_logprobs (was return_logprob sent with "
                          "top_logprobs_num?)") from None
    if not isinstance(tokens, list) or not isinstance(tops, list) or len(tokens) != len(tops):
        raise FormatError("output_token_logprobs and output_top_logprobs differ in length")
    steps = []
    for index in range(len(tokens)):  # lengths checked above
        item, top = tokens[index], tops[index]
        if not isinstance(item, list) or len(item) < 2 or not isinstance(item[1], int):
            raise FormatError(f"an output_token_logprobs entry without a token id: {str(item)[:120]}")
        pairs = [(entry[1], entry[0]) for entry in top or [] if isinstance(entry, list) and len(entry) >= 2]
        said = item[2] if len(item) > 2 and isinstance(item[2], str) else None
        steps.append(Step(item[1], _top(pairs, top_k), item[0], said))
    return steps


def vllm_prompt_steps(answer: Any, prompt_ids: list[int], top_k: int) -> list[Step]:
    """The forced positions (every prompt token after the first) of a vLLM answer with ``prompt_logprobs``."""
    try:
        entries = answer["choices"][0]["prompt_logprobs"]
    except (KeyError, IndexError, TypeError):
        raise FormatError("no choices[0].prompt_logprobs in the answer (was prompt_logprobs sent?)") from None
    if not isinstance(entries, list) or len(entries) != len(prompt_ids):
        raise FormatError(f"prompt_logprobs has {len(entries) if isinstance(entries, list) else 'no'} entries for "
                          f"{len(prompt_ids)} prompt tokens")
    steps = []
    for index in range(1, len(prompt_ids)):  # lengths checked above (zip's strict= is not in Python 3.9)
        token, entry = prompt_ids[index], entries[index] if isinstance(entries[index], dict) else {}
        ranked = [(int(key), value.get("logprob"), value.get("rank")) for key, value in entry.items()
                  if str(key).lstrip("-").isdigit() and isinstance(value, dict)]
        top = _top([(key, logprob) for key, logprob, rank in ranked if isinstance(rank, int) and rank <= top_k],
                   top_k)
        own = next((logprob for key, logprob, _ in ranked if key == token), None)
        said = next((value.get("decoded_token") for key, value in entry.items() if str(key) == str(token)), None)
        steps.append(Step(token, top, own, said if isinstance(said, str) else None))
    return steps


def sglang_prompt_steps(answer: Any, top_k: int) -> tuple:
    """``(prompt ids, forced positions)`` of an SGLang ``/generate`` answer with input logprobs from position 0."""
    try:
        meta = answer["meta_info"]
        tokens, tops = meta["input_token_logprobs"], meta["input_top_logprobs"]
    except (KeyError, TypeError):
        raise FormatError("no meta_info.input_token_logprobs / input_top_logprobs (was return_logprob sent with "
                          "logprob_start_len 0 and top_logprobs_num?)") from None
    if not isinstance(tokens, list) or not isinstance(tops, list) or len(tokens) != len(tops):
        raise FormatError("input_token_logprobs and input_top_logprobs differ in length")
    ids = []
    for item in tokens:
        if not isinstance(item, list) or len(item) < 2 or not isinstance(item[1], int):
            raise FormatError(f"an input_token_logprobs entry without a token id: {str(item)[:120]}")
        ids.append(item[1])
    steps = []
    for index in range(1, len(tokens)):  # lengths checked above
        logprob, token, top = tokens[index][0], tokens[index][1], tops[index]
        pairs = [(item[1], item[0]) for item in top or [] if isinstance(item, list) and len(item) >= 2]
        said = tokens[index][2] if len(tokens[index]) > 2 and isinstance(tokens[index][2], str) else None
        steps.append(Step(token, _top(pairs, top_k), logprob, said))
    return ids, steps
