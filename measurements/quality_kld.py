"""The quality pass's numbers on the sandbox's engine and model, and what one pass costs (no asserting).

Serves Gemma 3 270M with rigforge's own llama.cpp launcher (rigforge/remote/llama_launcher.py, xllamacpp) on a
loopback port, once per row, and runs the bench's quality pass (rigforge/bench/quality.py) with the sandbox
profile's settings:

- ``default``: the reference (the first pass of its start), then a second pass in the same start;
- ``default`` in another start, ``one-thread`` (1 thread), ``kv-q4`` (K cache q4_0, flash attention): each kept on
  the reference's path and compared with it (rigforge/quality/kld.py).

It prints per row the mean and p99 top-k KLD, same top token, the first divergence, and the pass's seconds and
requests (docs/bench.md#quality quotes a run). Takes a minute or two on a 2-core machine.

    .venv/bin/python measurements/quality_kld.py [--keep DIR]   # DIR: also write each pass as JSON there
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rigforge.bench.config import config_from_dict  # noqa: E402
from rigforge.bench.quality import run_quality  # noqa: E402
from rigforge.profile.loader import load_profile  # noqa: E402
from rigforge.quality.kld import compare_passes  # noqa: E402
from rigforge.quality.reference import quality_config  # noqa: E402
from rigforge.sandbox.model import ensure_gemma  # noqa: E402
from tests.bench_support.llama_server import free_loopback_port  # noqa: E402

LAUNCHER = REPO_ROOT / "rigforge" / "remote" / "llama_launcher.py"
ROWS = {"another start": ("--threads", "2"), "one-thread": ("--threads", "1"),
        "kv-q4": ("--threads", "2", "--cache-type-k", "q4_0", "--flash-attn", "on")}


def serve(model: Path, args: tuple[str, ...], alias: str = "gemma-3-270m") -> tuple[subprocess.Popen[bytes], str]:
    """The launcher on a free loopback port, once /health answers."""
    port = free_loopback_port()
    process = subprocess.Popen([sys.executable, str(LAUNCHER), "--model", str(model), "--alias", alias,
                                "--port", str(port), "--parallel", "4", "--ctx-size", "8192", *args],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(240):
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return process, url
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit("the llama.cpp launcher never answered /health")


def one_pass(url: str, reference: dict[str, Any] | None) -> dict[str, Any]:
    """The bench's quality pass against the server at ``url`` (kept on ``reference``'s path when given)."""
    stored = {"pass": reference} if reference else None
    block = quality_config(load_profile("sandbox").bench.quality, "llama.cpp", stored)
    result = run_quality(config_from_dict({"base_url": url, "model": "gemma-3-270m", "quality": block}))
    assert result is not None
    return result


def row(name: str, reference: dict[str, Any], candidate: dict[str, Any]) -> str:
    measured = compare_passes(reference, candidate)
    if measured.refused:
        return f"{name}: refused: {measured.refused}"
    return (f"{name}: mean KLD {measured.mean_kld:.4f}, p99 {measured.p99_kld:.3f}, same top token "
            f"{measured.same_top_percent:.1f} % of {measured.positions}; first divergence {measured.first_divergence}; "
            f"pass {candidate['seconds']:.1f} s, {candidate['requests']} requests")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="write each pass as JSON into this folder")
    args = parser.parse_args(argv)
    model = ensure_gemma(REPO_ROOT / ".cache" / "models")
    passes: dict[str, dict[str, Any]] = {}
    process, url = serve(model, ROWS["another start"])
    try:
        passes["reference"] = one_pass(url, None)
        passes["same start, second pass"] = one_pass(url, passes["reference"])
    finally:
        process.terminate()
        process.wait(timeout=30)
    print(f"reference: pass {passes['reference']['seconds']:.1f} s, {passes['reference']['requests']} requests")
    for name, launcher_args in ROWS.items():
        process, url = serve(model, launcher_args)
        try:
            passes[name] = one_pass(url, passes["reference"])
        finally:
            process.terminate()
            process.wait(timeout=30)
    for name, candidate in passes.items():
        if name != "reference":
            print(row(name, passes["reference"], candidate))
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        for name, candidate in passes.items():
            (args.keep / f"{name.replace(' ', '_').replace(',', '')}.json").write_text(json.dumps(candidate) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
