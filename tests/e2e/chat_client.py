"""A real chat client against a sandbox host's engine: OpenAI's own SDK (``openai``), through an SSH tunnel.

The engine listens on the host's loopback only (engine.host), so the test reaches it the way an owner reaches a
rig's engine from a laptop: ``ssh -F .sandbox/ssh_config -N -L LOCAL:127.0.0.1:8080 HOST`` (host keys pinned),
then the SDK with ``base_url=http://127.0.0.1:LOCAL/v1``. Nothing here knows rigforge's bench: what the SDK
gets back is what any chat client gets.

    with engine_tunnel(ssh_config, "full-3fa2", 8080) as base_url:
        answers = openai_session(base_url, "gemma-3-270m")
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.bench_support.llama_server import free_loopback_port

QUESTION = "What is the capital of France? Answer in one word."
TUNNEL_TIMEOUT_S = 60.0


@contextlib.contextmanager
def engine_tunnel(ssh_config: Path, host_name: str, remote_port: int) -> Iterator[str]:
    """``ssh -L`` to the engine on the host's loopback; yields the local base URL once /health answers through it."""
    port = free_loopback_port()
    tunnel = subprocess.Popen(
        ["ssh", "-F", str(ssh_config), "-N", "-o", "ExitOnForwardFailure=yes",
         "-L", f"127.0.0.1:{port}:127.0.0.1:{remote_port}", host_name],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + TUNNEL_TIMEOUT_S
        while not _healthy(base_url):
            if tunnel.poll() is not None:
                raise RuntimeError(f"ssh tunnel to {host_name} ended: {tunnel.stderr.read() if tunnel.stderr else ''}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the engine on {host_name} never answered /health through the tunnel")
            time.sleep(0.2)
        yield base_url
    finally:
        tunnel.terminate()
        tunnel.wait(timeout=15)


def _healthy(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(base_url + "/health", timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def openai_session(base_url: str, model: str, max_tokens: int = 24) -> dict[str, Any]:
    """What OpenAI's SDK gets from the engine: models, a completion, a chat answer and a streamed chat with usage."""
    from openai import OpenAI  # a test dependency only

    client = OpenAI(base_url=f"{base_url}/v1", api_key="unused", timeout=120, max_retries=0)
    completion = client.completions.create(model=model, prompt="Q: What is the capital of France?\nA:",
                                           max_tokens=4, temperature=0)
    chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": QUESTION}],
                                          max_tokens=max_tokens, temperature=0)
    stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": QUESTION}],
                                            max_tokens=max_tokens, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    pieces, chunks, usage, finish = [], 0, None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
                chunks += 1
            finish = choice.finish_reason or finish
    return {
        "models": [entry.id for entry in client.models.list().data],
        "completion": completion.choices[0].text,
        "completion_tokens": completion.usage.completion_tokens if completion.usage else None,
        "chat": chat.choices[0].message.content or "",
        "chat_finish": chat.choices[0].finish_reason,
        "chat_tokens": chat.usage.completion_tokens if chat.usage else None,
        "stream": "".join(pieces),
        "stream_chunks": chunks,
        "stream_finish": finish,
        "stream_usage": usage.model_dump() if usage is not None else None,
    }
