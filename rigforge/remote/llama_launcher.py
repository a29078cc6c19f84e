"""Run llama.cpp's own HTTP server (embedded in the xllamacpp wheel) in the foreground, for systemd.

Usage (the engine venv's python; flags follow llama-server's names):
    python llama_launcher.py --model M.gguf --alias NAME --host 127.0.0.1 --port 8080 \\
        --threads 2 --parallel 4 --ctx-size 8192 [--batch-size 512 ...] [--api-key-file FILE]

The server lives inside this process: it answers /health, /v1/models, /v1/completions,
/v1/chat/completions, /tokenize and /metrics until SIGTERM or SIGINT, then exits 0. A model that
cannot be loaded ends the process with a non-zero status, so systemd sees the failure.

With ``--api-key-file`` every request but /health must carry ``Authorization: Bearer <key>`` (401
otherwise). The launcher reads the key from that file (its first line) itself: llama-server's own
``--api-key``/``LLAMA_API_KEY`` would put it on the command line or in the environment.

This file is standard library only at import time (rigforge reads ``LAUNCHER_FLAGS`` from it on the
controller); xllamacpp is imported when the server starts.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

#: ggml's type numbers for llama-server's --cache-type-k/-v names (ggml.h's enum ggml_type, as xllamacpp's
#: ggml_type enum gives them: F32 0, F16 1, Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8, BF16 30).
GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "bf16": 30}
#: llama.cpp's flash attention switch (enum llama_flash_attn_type: auto -1, disabled 0, enabled 1).
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}


def ggml_type(name: str) -> int:
    """A --cache-type-k/-v name as ggml's type number (argparse shows the ValueError as a bad value)."""
    if name not in GGML_TYPES:
        raise ValueError(f"{name!r} is not one of {', '.join(GGML_TYPES)}")
    return GGML_TYPES[name]


def flash_attn(name: str) -> int:
    """A --flash-attn value (on, off, auto) as llama.cpp's switch."""
    if name not in FLASH_ATTN:
        raise ValueError(f"{name!r} is not one of {', '.join(FLASH_ATTN)}")
    return FLASH_ATTN[name]


#: Optional llama-server flags the launcher accepts: flag -> (CommonParams attribute path, type).
LAUNCHER_FLAGS: dict[str, tuple[str, Any]] = {
    "--batch-size": ("n_batch", int),
    "--ubatch-size": ("n_ubatch", int),
    "--threads-batch": ("cpuparams_batch.n_threads", int),
    "--n-predict": ("n_predict", int),
    "--cache-reuse": ("n_cache_reuse", int),
    "--keep": ("n_keep", int),
    "--metrics": ("endpoint_metrics", bool),
    "--slots": ("endpoint_slots", bool),
    "--no-warmup": ("warmup", bool),
    "--rope-freq-base": ("rope_freq_base", float),
    # A llama.cpp built-in template name (gemma, chatml, ...) or a Jinja template's text; names need --no-jinja.
    "--chat-template": ("chat_template", str),
    "--no-jinja": ("use_jinja", bool),
    # KV cache element types (ggml type names: f16, q8_0, q4_0, …) and flash attention (on, off, auto); a
    # quantized V cache needs flash attention in llama.cpp.
    "--cache-type-k": ("cache_type_k", ggml_type),
    "--cache-type-v": ("cache_type_v", ggml_type),
    "--flash-attn": ("flash_attn_type", flash_attn),
}

#: Boolean flags that switch a default off rather than on.
_NEGATED = {"--no-warmup", "--no-jinja"}


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse the launcher's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="GGUF file to serve")
    parser.add_argument("--alias", required=True, help="model name the API reports and accepts")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True, help="CPU threads for generation")
    parser.add_argument("--parallel", type=int, required=True, help="concurrent request slots")
    parser.add_argument("--ctx-size", type=int, required=True, help="total context, split over the slots")
    parser.add_argument("--api-key-file", help="file whose first line is the key every request must carry")
    for flag, (_, kind) in LAUNCHER_FLAGS.items():
        if kind is bool:
            parser.add_argument(flag, action="store_true")
        else:
            parser.add_argument(flag, type=kind)
    return parser.parse_args(argv)


def set_param(params: Any, path: str, value: Any) -> None:
    """Set a (dotted) CommonParams attribute, e.g. ``cpuparams_batch.n_threads``."""
    *parents, name = path.split(".")
    target = params
    for parent in parents:
        target = getattr(target, parent)
    setattr(target, name, value)


def build_params(args: argparse.Namespace, xllamacpp: Any) -> Any:
    """CommonParams for the server from the parsed flags."""
    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}
    params.hostnames = [args.host]
    params.port = args.port
    params.n_parallel = args.parallel
    params.n_ctx = args.ctx_size
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    for flag, (path, kind) in LAUNCHER_FLAGS.items():
        value = getattr(args, flag.removeprefix("--").replace("-", "_"))
        if kind is bool and value:
            set_param(params, path, flag not in _NEGATED)
        elif kind is not bool and value is not None:
            set_param(params, path, value)
    if args.api_key_file:
        params.api_keys = [read_api_key(args.api_key_file)]
    return params


def read_api_key(path: str) -> str:
    """The key on the first line of ``path`` (engine_entry.py's reader); an error names the file, never the key."""
    try:
        from engine_entry import EntryError, read_key  # on the rig: uploaded beside this file
    except ImportError:
        from rigforge.remote.engine_entry import EntryError, read_key
    try:
        return read_key(path)
    except EntryError as error:
        raise SystemExit(f"llama_launcher: {error}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Start the server and block until SIGTERM/SIGINT."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import xllamacpp  # only on the rig, inside the engine venv

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server = xllamacpp.Server(build_params(args, xllamacpp))
    print(f"llama_launcher: serving {args.model} as {args.alias!r} at {server.listening_address}", flush=True)
    stop.wait()
    print("llama_launcher: stopping", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
