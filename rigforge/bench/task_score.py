"""The bench's graded task pass: few-shot word problems through the engine's ``/v1/completions``, answers kept.

GSM8K's few-shot form as SGLang's CI (python/sglang/test/few_shot_gsm8k.py) and lm-evaluation-harness's ``gsm8k``
task send it: worked examples as ``Question: …\\nAnswer: …`` blocks separated by a blank line, then the question
to answer as ``Question: …\\nAnswer:``; greedy, stopped at the next ``Question:`` (or an end-of-text marker a
base model may write). The rig only asks and keeps what the engine answered; the controller grades
(rigforge/quality/tasks.py), so the graded numbers never travel to the rig.

Config (``quality.task_score`` in the bench config; validated by ``check_task_score``)::

    {"set": "word_problems.jsonl@3f2a…", "shots": "Question: …\\nAnswer: … #### 72\\n\\n…", "max_tokens": 256,
     "concurrency": 8, "stop": ["Question:", "</s>", "<|im_end|>"], "questions": [{"id": "q5", "question": "…"}]}

Result: ``{"set", "seconds", "requests", "answers": [{"id", "text", "finish_reason", "completion_tokens",
"error"}]}``: an engine error is kept with its question (``error``, text empty), never raised.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rigforge.bench.transport import request

KEYS = ("set", "shots", "max_tokens", "concurrency", "stop", "questions")
#: Where generation stops: the next question of the few-shot form, or an end-of-text marker written as text.
STOP = ["Question:", "</s>", "<|im_end|>"]


def question_block(question: str) -> str:
    """One question as the few-shot form asks it (the model writes the answer after ``Answer:``)."""
    return f"Question: {question}\nAnswer:"


def shots_prefix(shots: list[tuple[str, str]]) -> str:
    """The worked examples (question, worked answer ending ``#### N``) as the prompt's prefix.

    >>> shots_prefix([("2+2?", "2+2=4\\n#### 4")])
    'Question: 2+2?\\nAnswer: 2+2=4\\n#### 4\\n\\n'
    """
    return "".join(f"{question_block(question)} {worked}\n\n" for question, worked in shots)


def check_task_score(value: Any) -> None:
    """Raise ValueError naming the field when ``quality.task_score`` cannot drive a task pass; None is allowed."""
    if value is None:
        return
    if not isinstance(value, dict) or set(value) != set(KEYS):
        raise ValueError(f"quality.task_score must be an object with the keys {list(KEYS)}, got {str(value)[:200]}")
    for name in ("max_tokens", "concurrency"):
        number = value[name]
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise ValueError(f"quality.task_score.{name} must be a positive integer, got {number!r}")
    if not isinstance(value["set"], str) or not isinstance(value["shots"], str):
        raise ValueError("quality.task_score.set and .shots must be strings")
    if not isinstance(value["stop"], list) or not all(isinstance(item, str) and item for item in value["stop"]):
        raise ValueError("quality.task_score.stop must be a list of non-empty strings")
    questions = value["questions"]
    if not isinstance(questions, list) or not questions or not all(
            isinstance(item, dict) and isinstance(item.get("id"), str) and isinstance(item.get("question"), str)
            for item in questions):
        raise ValueError("quality.task_score.questions must be a non-empty list of {id, question}")


def read_answer(status: int, body: str) -> dict[str, Any]:
    """One ``/v1/completions`` answer as the pass keeps it: the text, why it stopped, its tokens, or the error."""
    answer: dict[str, Any] = {"text": "", "finish_reason": None, "completion_tokens": None, "error": None}
    if status != 200:
        answer["error"] = f"/v1/completions answered {status}: {body[:200]}"
        return answer
    try:
        data = json.loads(body)
        choice = data["choices"][0]
        answer.update(text=str(choice["text"]), finish_reason=choice.get("finish_reason"),
                      completion_tokens=(data.get("usage") or {}).get("completion_tokens"))
    except (ValueError, KeyError, IndexError, TypeError):
        answer["error"] = f"/v1/completions answered no completion: {body[:200]}"
    return answer


def run_task_score(config: Any, block: dict[str, Any]) -> dict[str, Any]:
    """Every question of ``block`` asked ``block['concurrency']`` at a time (greedy, the block's stops)."""

    def ask(item: dict[str, str]) -> dict[str, Any]:
        payload = {"model": config.model, "prompt": block["shots"] + question_block(item["question"]),
                   "max_tokens": block["max_tokens"], "temperature": 0.0, "stop": block["stop"], "stream": False}
        status, body = request(config.root_url, "POST", "/v1/completions", payload, config.request_timeout_s)
        return {"id": item["id"], **read_answer(status, body)}

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=block["concurrency"]) as pool:
        answers = list(pool.map(ask, block["questions"]))
    return {"set": block["set"], "answers": answers, "requests": len(answers),
            "seconds": round(time.perf_counter() - started, 3)}
