"""HTTP to the server with ``http.client``: plain JSON calls and timestamped streaming reads.

The streaming reader only stamps and stores each line; parsing happens after the request
ends, so the time taken to parse JSON never shifts a measured arrival time.
"""

from __future__ import annotations

import http.client
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

#: A key given by hand when running the client against another server (the bench role names a key file).
API_KEY_ENV = "RIGFORGE_BENCH_API_KEY"
_api_key: str | None = None


@dataclass
class RawStream:
    """What came back for one streaming request, before interpretation.

    ``lines`` holds (perf_counter seconds, decoded line) for every non-empty line received.
    ``status`` is 0 when no HTTP response arrived (connection refused, timeout before headers).
    """

    sent_at: float
    status: int = 0
    lines: list[tuple[float, str]] = field(default_factory=list)
    body: str = ""
    transport_error: str | None = None
    ended_at: float = 0.0


def _connection(root_url: str, timeout_s: float) -> http.client.HTTPConnection:
    """A fresh connection to the server root (http or https)."""
    parts = urlsplit(root_url)
    host = parts.hostname or "127.0.0.1"
    if parts.scheme == "https":
        return http.client.HTTPSConnection(host, parts.port or 443, timeout=timeout_s)
    return http.client.HTTPConnection(host, parts.port or 80, timeout=timeout_s)


class ApiKeyError(OSError):
    """The API key file cannot be read or is empty (the message names the file, never its content)."""


def use_api_key_file(path: str) -> None:
    """Send the key on the first line of ``path`` with every request of this process (read once, here)."""
    global _api_key
    try:
        with open(path, encoding="utf-8") as handle:
            key = handle.readline().strip()
    except OSError as error:
        raise ApiKeyError(f"cannot read the API key file {path}: {error.strerror}") from None
    if not key:
        raise ApiKeyError(f"the API key file {path} is empty")
    _api_key = key


def _headers() -> dict[str, str]:
    """Request headers, with a bearer token when a key file was read or the key is in the environment."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    api_key = _api_key or os.environ.get(API_KEY_ENV)
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _base_path(root_url: str) -> str:
    """Any path prefix of the root URL (a server behind a proxy at /llm), without trailing slash."""
    return urlsplit(root_url).path.rstrip("/")


def request(root_url: str, method: str, path: str, payload: dict[str, Any] | None, timeout_s: float) -> tuple[int, str]:
    """One non-streaming request; returns (HTTP status, body text). Status 0 means no response."""
    connection = _connection(root_url, timeout_s)
    body = json.dumps(payload).encode() if payload is not None else None
    try:
        connection.request(method, _base_path(root_url) + path, body=body, headers=_headers())
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8", errors="replace")
    except (OSError, http.client.HTTPException) as error:
        return 0, f"{type(error).__name__}: {error}"
    finally:
        connection.close()


def get_json(root_url: str, path: str, timeout_s: float) -> Any | None:
    """GET a JSON document; None when the server does not answer 200 with JSON."""
    status, text = request(root_url, "GET", path, None, timeout_s)
    if status != 200:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def post_stream(root_url: str, path: str, payload: dict[str, Any], timeout_s: float) -> RawStream:
    """POST a streaming request and record every line with its arrival time.

    ``timeout_s`` bounds both each socket read and the whole request.
    """
    connection = _connection(root_url, timeout_s)
    body = json.dumps(payload).encode()
    raw = RawStream(sent_at=time.perf_counter())
    deadline = raw.sent_at + timeout_s
    try:
        connection.request("POST", _base_path(root_url) + path, body=body, headers=_headers())
        response = connection.getresponse()
        raw.status = response.status
        if response.status != 200:
            raw.body = response.read().decode("utf-8", errors="replace")
            return raw
        while True:
            line = response.readline()
            now = time.perf_counter()
            if not line:
                break
            text = line.decode("utf-8", errors="replace").strip()
            if text:
                raw.lines.append((now, text))
            if text == "data: [DONE]":
                break
            if now > deadline:
                raw.transport_error = f"timeout: request exceeded {timeout_s:g}s"
                break
    except (OSError, http.client.HTTPException) as error:
        raw.transport_error = f"{type(error).__name__}: {error}"
    finally:
        raw.ended_at = time.perf_counter()
        connection.close()
    return raw
