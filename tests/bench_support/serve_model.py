"""Run llama.cpp's own server (embedded in the xllamacpp wheel) on 127.0.0.1 until killed.

Run as a subprocess by ``llama_server.start_llama_server``: the server lives inside the
Python process that creates it, so a separate process keeps the test process free and lets
the test stop it by pid.

    python -m tests.bench_support.serve_model --model M.gguf --port 18080 --parallel 4 --ctx 8192 \
        [--chat-template gemma --no-jinja]
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Command-line options of the server process."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--ctx", type=int, default=8192, help="total context, split over the parallel slots")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--chat-template", default=None, help="llama.cpp built-in template name or Jinja text")
    parser.add_argument("--no-jinja", action="store_true", help="legacy templating (needed for a built-in name)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    """Start the server and block until SIGTERM/SIGINT."""
    import xllamacpp

    args = parse_args(argv)
    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.port = args.port
    params.n_parallel = args.parallel
    params.n_ctx = args.ctx
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.endpoint_metrics = True
    if args.chat_template is not None:
        params.chat_template = args.chat_template
    params.use_jinja = not args.no_jinja
    server = xllamacpp.Server(params)
    print(f"serving {args.model} at {server.listening_address}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
