"""Our client's decode rate beside llama.cpp's own, measured side by side in one run (no asserting).

Starts llama.cpp's server (xllamacpp) with Gemma 3 270M on 127.0.0.1, runs the smoke benchmark
at C=1 and C=8, and prints per cell: decode tok/s per user from our client (1/TPOT, tokens from
usage) against llama.cpp's ``timings.predicted_per_second`` for the same requests, and the
system output rate against the server's generated-token counter over the same window.

    .venv/bin/python measurements/client_vs_server.py [--seconds 5] [--output-tokens 64] [--input-tokens 128]
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rigforge.bench.config import config_from_dict  # noqa: E402
from rigforge.bench.runner import run_bench  # noqa: E402
from rigforge.sandbox.model import ensure_gemma  # noqa: E402
from tests.bench_support.llama_server import start_llama_server  # noqa: E402

CONCURRENCY = [1, 8]


def ratio(ours: float | None, theirs: float | None) -> str:
    """ours / theirs as text, or a dash."""
    return f"{ours / theirs:.3f}" if ours and theirs else "-"


def cell_line(cell: dict[str, Any]) -> str:
    """One printed row: client vs server per-user decode rate and system output rate."""
    if cell["status"] != "ok":
        return f"C={cell['concurrency']:<3} FAILED {cell['reason']}"
    metrics, server = cell["metrics"], cell["server"]
    client_user = metrics["decode_tps_per_user"]["median"]
    server_user = (metrics["server_decode_tps_per_user"] or {}).get("median")
    client_system = metrics["output_throughput"]
    counted = server.get("server_generation_tokens")
    server_system = counted / metrics["duration_s"] if counted is not None else None
    return (
        f"C={cell['concurrency']:<3} req={metrics['completed']:<4} "
        f"decode/user client {client_user:8.1f}  server {server_user or 0:8.1f}"
        f"  ratio {ratio(client_user, server_user)}"
        f"  | output client {client_system:8.1f}  server-counter {server_system or 0:8.1f}"
        f"  ratio {ratio(client_system, server_system)}  tokens/chunks "
        f"{metrics['total_output_tokens']}/{metrics['total_output_chunks']}"
    )


def main() -> int:
    """Serve Gemma, run the two cells, print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window per cell")
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--input-tokens", type=int, default=128)
    args = parser.parse_args()
    model = ensure_gemma(REPO_ROOT / ".cache" / "models")
    slot_tokens = args.input_tokens + args.output_tokens + 64
    print(f"serving {model.name} with 8 slots of {slot_tokens} tokens", flush=True)
    with start_llama_server(model, parallel=max(CONCURRENCY), ctx=max(CONCURRENCY) * slot_tokens) as server:
        config = config_from_dict(
            {
                "base_url": server.base_url,
                "model": "gemma-3-270m",
                "concurrency": CONCURRENCY,
                "input_tokens": [args.input_tokens],
                "output_tokens": args.output_tokens,
                "cell_seconds": args.seconds,
                "warmup_requests": 2,
                "request_timeout_s": 300,
            }
        )
        result = run_bench(config, progress=io.StringIO())
    print(f"client vs llama.cpp, input {args.input_tokens}, output {args.output_tokens}, {args.seconds:g} s cells")
    for cell in result["cells"]:
        print(cell_line(cell))
    probes = "ok" if all(probe["passed"] for probe in result["sanity"]["probes"]) else "FAILED"
    print(f"summary: run {result['status']}, probes {probes}, {len(result['cells'])} cells; ratio 1.000 = agreement")
    return 0


if __name__ == "__main__":
    sys.exit(main())
