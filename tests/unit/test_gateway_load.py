"""The load client's stages of a failed stream (tests/bench_support/gateway_load.py), against a socket that answers
as far as each stage: nothing, an error status, a 200's headers only, one token, the whole stream.

What a gateway can retry depends on the stage (HAProxy's retry-on acts only before a 200's headers), so the client
must tell them apart, and a stream cut mid-chunk (``http.client.IncompleteRead``, no OSError) must be counted, not
end the client's thread.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from tests.bench_support.gateway_load import counts, one_request, stream_stage

HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
TOKEN = b'data: {"choices":[{"text":" Paris"}]}\n\n'


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


ANSWERS = {
    "nothing": b"",
    "error status": b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    "headers only": HEADERS,
    "one token": HEADERS + chunk(TOKEN),
    "cut mid-chunk": HEADERS + chunk(TOKEN) + b"40\r\ndata: {",
    "whole stream": HEADERS + chunk(TOKEN) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n",
}


@pytest.fixture
def engine() -> Iterator[tuple[str, dict[str, bytes]]]:
    """A listening socket that reads each request and writes the bytes of ``wanted["answer"]``, then closes."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    wanted = {"answer": b""}

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            with connection:
                connection.recv(65536)
                connection.sendall(wanted["answer"])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}", wanted
    server.close()


@pytest.mark.parametrize(("answer", "stage", "ok"), [
    ("nothing", "before headers", False),
    ("error status", "before headers", False),
    ("headers only", "after headers", False),
    ("one token", "after a token", False),
    ("cut mid-chunk", "after a token", False),
    ("whole stream", "after a token", True),
])
def test_a_streams_outcome_says_how_far_it_got(engine, answer: str, stage: str, ok: bool) -> None:
    url, wanted = engine
    wanted["answer"] = ANSWERS[answer]
    outcome = one_request(url, "key", stream=True, model="m", timeout_s=10)
    assert (outcome.ok, stream_stage(outcome)) == (ok, stage)
    assert outcome.status == (503 if answer == "error status" else None)


def test_the_counts_split_the_streams_failed_before_a_token_by_their_headers(engine) -> None:
    url, wanted = engine
    outcomes = []
    for answer in ("nothing", "error status", "headers only", "one token", "whole stream"):
        wanted["answer"] = ANSWERS[answer]
        outcomes.append(one_request(url, "key", stream=True, model="m", timeout_s=10))
    tally = counts(outcomes)
    assert tally["stream failed before headers"] == 2  # what a gateway retries
    assert tally["stream failed after headers"] == 1  # what it cannot
    assert tally["stream failed after a token"] == 1
    assert tally["stream failed before a token"] == 3
