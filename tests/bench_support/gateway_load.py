"""A bounded load of completions, non-streamed and streamed, through a gateway or straight to an engine.

Each request's outcome records whether a stream had delivered a token when it failed: a gateway may retry a
request no rig has answered yet, never one whose answer has begun. Loops stop by themselves at ``until``.

Example::

    outcomes = load("http://127.0.0.1:8090", key, clients=4, until=time.monotonic() + 20, streams=True)
    failed_plain = [o for o in outcomes if o.kind == "plain" and not o.ok]
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

PROMPT = "Q: What is the capital of France?\nA:"


@dataclass
class Outcome:
    """One request: its kind (``plain`` or ``stream``), when it began, whether it succeeded."""

    kind: str
    started: float
    ok: bool
    first_token: bool = False  # a stream that had delivered a token (when it failed: nobody could retry it)
    seconds: float = 0.0
    status: int | None = None  # the HTTP status of a refused request


def one_request(base_url: str, key: str | None, stream: bool, model: str, max_tokens: int = 8,
                timeout_s: float = 120) -> Outcome:
    """One completion; a stream is ok only when it ends with ``[DONE]``, a plain answer when it has a text."""
    began = time.monotonic()
    body = json.dumps({"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0,
                       "stream": stream}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(base_url + "/v1/completions", data=body, headers=headers)
    outcome = Outcome("stream" if stream else "plain", began, ok=False)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            if not stream:
                outcome.ok = isinstance(json.loads(response.read())["choices"][0]["text"], str)
            else:
                for raw in response:
                    line = raw.decode().strip()
                    if line == "data: [DONE]":
                        outcome.ok = True
                    elif line.startswith("data: "):
                        outcome.first_token = True
    except urllib.error.HTTPError as error:
        outcome.status = error.code
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError):
        pass
    outcome.seconds = time.monotonic() - began
    return outcome


def load(base_url: str, key: str | None, clients: int, until: float, streams: bool, model: str,
         max_tokens: int = 8, stop: threading.Event | None = None) -> list[Outcome]:
    """``clients`` threads sending requests back to back until ``until`` or ``stop`` (every other one streamed)."""
    outcomes: list[Outcome] = []

    def client(index: int) -> None:
        count = 0
        while time.monotonic() < until and not (stop and stop.is_set()):
            outcomes.append(one_request(base_url, key, stream=streams and (count + index) % 2 == 1, model=model,
                                        max_tokens=max_tokens))
            count += 1

    threads = [threading.Thread(target=client, args=(index,)) for index in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def counts(outcomes: list[Outcome]) -> dict[str, int]:
    """Sent, and failed by kind: plain; streams before their first token; streams after it."""
    return {"sent": len(outcomes),
            "plain": sum(1 for o in outcomes if o.kind == "plain"),
            "stream": sum(1 for o in outcomes if o.kind == "stream"),
            "plain failed": sum(1 for o in outcomes if o.kind == "plain" and not o.ok),
            "stream failed before a token": sum(1 for o in outcomes if o.kind == "stream" and not o.ok
                                                and not o.first_token),
            "stream failed after a token": sum(1 for o in outcomes if o.kind == "stream" and not o.ok
                                               and o.first_token)}
