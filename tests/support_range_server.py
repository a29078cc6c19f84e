"""A real HTTP server on 127.0.0.1 that serves one payload with Range support, for download tests.

Behaviour is switched per test through attributes, so each failure a downloader must survive is
produced by real sockets, not by mocks:
    cuts         bytes to send before dropping the connection, one entry per request (None: all)
    ignore_range answer 200 with the whole payload even when a Range is asked for
    hold_after   send this many bytes, then stall until ``release`` is set (for killing a client)
Every request is recorded (path and the headers a test may assert on) in ``requests``.
"""

from __future__ import annotations

import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


class RangeServer:
    """Serves ``payload`` at /file; /redirect-same and /redirect-other answer 302 to /file, the
    latter on another host name; any other path is 404."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload
        self.cuts: list[int | None] = []
        self.ignore_range = False
        self.hold_after: int | None = None
        self.release = threading.Event()
        self.requests: list[dict[str, str | None]] = []
        self._server = _QuietServer(("127.0.0.1", 0), _handler_for(self))
        # a short poll interval keeps shutdown (once per test) quick
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def url(self, path: str = "/file", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def __enter__(self) -> RangeServer:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()


class _QuietServer(ThreadingHTTPServer):
    """Clients that give up mid-body (as the tests make them) are expected, not errors to print."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _handler_for(server: RangeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - name fixed by http.server
            server.requests.append(
                {
                    "path": self.path,
                    "host": self.headers.get("Host"),
                    "range": self.headers.get("Range"),
                    "authorization": self.headers.get("Authorization"),
                }
            )
            if self.path in ("/redirect-same", "/redirect-other"):
                # "127.1" is the same loopback address under another name: another origin to a client
                host = "127.1" if self.path == "/redirect-other" else "127.0.0.1"
                self._send_empty(302, "Location", server.url("/file", host))
            elif self.path != "/file":
                self._send_empty(404, "X-Missing", self.path)
            else:
                self._send_payload()

        def _send_empty(self, code: int, header: str, value: str) -> None:
            self.send_response(code)
            self.send_header(header, value)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _send_payload(self) -> None:
            payload, total = server.payload, len(server.payload)
            match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
            start = int(match.group(1)) if match and not server.ignore_range else None
            if start is not None and start >= total:
                self._send_empty(416, "Content-Range", f"bytes */{total}")
                return
            body = payload[start or 0 :]
            self.send_response(206 if start is not None else 200)
            if start is not None:
                self.send_header("Content-Range", f"bytes {start}-{total - 1}/{total}")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            cut = server.cuts.pop(0) if server.cuts else None
            hold, server.hold_after = server.hold_after, None  # only the first response stalls
            if hold is not None:
                self.wfile.write(body[:hold])
                self.wfile.flush()
                server.release.wait(timeout=120)
                return  # the connection closes here, short of Content-Length
            self.wfile.write(body if cut is None else body[:cut])

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - signature fixed
            pass  # keep test output clean

    return Handler
