"""Start a real llama.cpp server (xllamacpp) on a free 127.0.0.1 port in a subprocess, for tests.

Example::

    with start_llama_server(model_path, parallel=4) as server:
        urllib.request.urlopen(server.base_url + "/health")
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class RunningServer:
    """A server process the test started, and where it listens."""

    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def is_healthy(base_url: str) -> bool:
    """True once the server answers /health with 200 (it answers 503 while loading)."""
    try:
        with urllib.request.urlopen(base_url + "/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def wait_until_healthy(server: RunningServer, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
    """Poll /health; fail with the server's log tail if it exits or never becomes ready."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"llama server exited early:\n{server.log_path.read_text()[-3000:]}")
        if is_healthy(server.base_url):
            return
        time.sleep(0.2)
    raise TimeoutError(f"llama server not healthy after {timeout_s:.0f}s:\n{server.log_path.read_text()[-3000:]}")


@contextlib.contextmanager
def start_llama_server(
    model_path: Path, parallel: int = 4, ctx: int = 8192, log_dir: Path | None = None,
    extra_args: tuple[str, ...] = (),
) -> Iterator[RunningServer]:
    """Serve ``model_path`` with llama.cpp's server until the block ends; stops only its own process.

    + extra_args: more ``serve_model`` options, e.g. ``("--chat-template", "gemma", "--no-jinja")``
    """
    port = free_loopback_port()
    log_path = (log_dir or model_path.parent) / f"llama-server-{port}.log"
    command = [
        sys.executable, "-m", "tests.bench_support.serve_model", "--model", str(model_path),
        "--port", str(port), "--parallel", str(parallel), "--ctx", str(ctx), *extra_args,
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
    server = RunningServer(base_url=f"http://127.0.0.1:{port}", process=process, log_path=log_path)
    try:
        wait_until_healthy(server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)
