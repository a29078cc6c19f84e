"""A bounded load of completions, non-streamed and streamed, through a gateway or straight to an engine.

Each request's outcome records how far a failed stream had got: no response headers (nothing answered, or an error
status: HAProxy's ``retry-on`` retries these on another rig), headers but no token (HAProxy forwards a 200's headers
as they come: nothing retries it after them; llama.cpp's server sends its headers only once the first token's chunk
exists, so this needs the engine to die between two writes of one thread), or a token (nobody can resume it). Loops
stop by themselves at ``until``.

Example::

    outcomes = load("http://127.0.0.1:8090", key, clients=4, until=time.monotonic() + 20, streams=True)
    failed_plain = [o for o in outcomes if o.kind == "plain" and not o.ok]
"""

from __future__ import annotations

import http.client
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
    headers: bool = False  # a 200's response headers came (from then on no gateway retries it)
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
            outcome.headers = True
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
    # A stream cut mid-chunk raises http.client.IncompleteRead, which is no OSError: uncaught, it would end the
    # client's thread and hide the failure (and every later request of that client).
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError, KeyError, IndexError):
        pass
    outcome.seconds = time.monotonic() - began
    return outcome


def load(base_url: str, key: str | None, clients: int, until: float, streams: bool, model: str,
         max_tokens: int = 8, stop: threading.Event | None = None, pause_s: float = 0.0,
         outcomes: list[Outcome] | None = None) -> list[Outcome]:
    """``clients`` threads sending requests until ``until`` or ``stop`` (every other one streamed), each waiting
    ``pause_s`` after an answer (0: back to back; a user's think time keeps the load bounded); each outcome is
    appended to ``outcomes`` (a new list when None) as it comes, and the list returned."""
    outcomes = [] if outcomes is None else outcomes

    def client(index: int) -> None:
        count = 0
        while time.monotonic() < until and not (stop and stop.is_set()):
            outcomes.append(one_request(base_url, key, stream=streams and (count + index) % 2 == 1, model=model,
                                        max_tokens=max_tokens))
            count += 1
            if pause_s and stop is not None:
                stop.wait(pause_s)
            elif pause_s:
                time.sleep(pause_s)

    threads = [threading.Thread(target=client, args=(index,)) for index in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def stream_stage(outcome: Outcome) -> str:
    """How far a stream had got: ``before headers`` (the gateway can retry it), ``after headers`` (headers, no token:
    it cannot) or ``after a token`` (nobody can)."""
    if outcome.first_token:
        return "after a token"
    return "after headers" if outcome.headers else "before headers"


def counts(outcomes: list[Outcome]) -> dict[str, int]:
    """Sent, and failed by kind: plain; streams before their response headers (a gateway retries those), after them
    but before a token, after a token; and the streams failed before a token in all (the two first kinds)."""
    failed_streams = [o for o in outcomes if o.kind == "stream" and not o.ok]
    tally = {"sent": len(outcomes),
             "plain": sum(1 for o in outcomes if o.kind == "plain"),
             "stream": sum(1 for o in outcomes if o.kind == "stream"),
             "plain failed": sum(1 for o in outcomes if o.kind == "plain" and not o.ok)}
    for stage in ("before headers", "after headers", "after a token"):
        tally[f"stream failed {stage}"] = sum(1 for o in failed_streams if stream_stage(o) == stage)
    tally["stream failed before a token"] = tally["stream failed before headers"] + tally["stream failed after headers"]
    return tally
