"""The quality pass's numbers on the sandbox's engine and model: its A/A noise, real recipes, and what a pass costs.

Serves Gemma 3 270M with rigforge's own llama.cpp launcher (rigforge/remote/llama_launcher.py, xllamacpp) on a
loopback port, once per row, and runs the bench's quality pass (rigforge/bench/quality.py) with the sandbox
profile's settings (top-20, 4 texts x 32 greedy tokens):

- ``default``: the reference (the first pass of its start); then its **A/A passes**: a second pass in the same
  start (its prompts cached), ``default`` in another start, and ``default`` in another start while two CPU-bound
  processes load the machine (``under load``);
- ``one-thread`` (1 thread), ``kv-q8`` (K cache q8_0), ``kv-q4`` (K cache q4_0, flash attention): each kept on the
  reference's path and compared with it (rigforge/quality/kld.py).

It prints per row the mean top-k KLD with its 95 % interval, p99, same top token, the rest mass, the first
divergence, the pass's seconds and requests, and the judgement rigforge/quality/judge.py gives it with the
largest A/A interval top as the noise (docs/bench.md#quality quotes a run). A few minutes on a 2-core machine;
starts servers, so run it under the e2e lock.

    flock /work/coord/e2e.lock .venv/bin/python measurements/quality_kld.py [--keep DIR]  # DIR: each pass as JSON
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
from rigforge.quality.judge import judge_quality  # noqa: E402
from rigforge.quality.kld import compare_passes  # noqa: E402
from rigforge.quality.reference import quality_config  # noqa: E402
from rigforge.sandbox.model import ensure_gemma  # noqa: E402
from tests.bench_support.llama_server import free_loopback_port  # noqa: E402

LAUNCHER = REPO_ROOT / "rigforge" / "remote" / "llama_launcher.py"
DEFAULT = ("--threads", "2")
ROWS = {"another start": DEFAULT, "another start, under load": DEFAULT, "one-thread": ("--threads", "1"),
        "kv-q8": ("--threads", "2", "--cache-type-k", "q8_0", "--flash-attn", "on"),
        "kv-q4": ("--threads", "2", "--cache-type-k", "q4_0", "--flash-attn", "on")}
AA_ROWS = ("same start, second pass", "another start", "another start, under load")


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


def load() -> list[subprocess.Popen[bytes]]:
    """Two CPU-bound processes (the machine under load while a pass runs)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]


def row(name: str, reference: dict[str, Any], candidate: dict[str, Any], noise: dict[str, Any] | None) -> str:
    measured = compare_passes(reference, candidate)
    if measured.refused:
        return f"{name}: refused: {measured.refused}"
    low, high = measured.interval or (0.0, 0.0)
    against = {**measured.as_dict(), "tolerance": load_profile("sandbox").bench.quality.max_mean_kld,
               "noise": noise, "imported": False}
    judged = judge_quality({"against_reference": against}).state if noise is not None else "(an A/A row)"
    return (f"{name}: mean KLD {measured.mean_kld:.4f} [{low:.4f}, {high:.4f}], p99 {measured.p99_kld:.3f}, same top "
            f"token {measured.same_top_percent:.1f} % of {measured.positions}, top-{measured.top_k} rest mass "
            f"{measured.rest_mass:.2f} (p90 {measured.rest_p90:.2f}); first divergence {measured.first_divergence}; "
            f"pass {candidate['seconds']:.1f} s, {candidate['requests']} requests; judged: {judged}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--keep", type=Path, help="write each pass as JSON into this folder")
    args = parser.parse_args(argv)
    model = ensure_gemma(REPO_ROOT / ".cache" / "models")
    passes: dict[str, dict[str, Any]] = {}
    process, url = serve(model, DEFAULT)
    try:
        passes["reference"] = one_pass(url, None)
        passes["same start, second pass"] = one_pass(url, passes["reference"])
    finally:
        process.terminate()
        process.wait(timeout=30)
    print(f"reference: pass {passes['reference']['seconds']:.1f} s, {passes['reference']['requests']} requests")
    for name, launcher_args in ROWS.items():
        process, url = serve(model, launcher_args)
        burners = load() if "under load" in name else []
        try:
            passes[name] = one_pass(url, passes["reference"])
        finally:
            for burner in burners:
                burner.kill()
                burner.wait()
            process.terminate()
            process.wait(timeout=30)
    noises = [compare_passes(passes["reference"], passes[name]) for name in AA_ROWS]
    top = max(noises, key=lambda measured: (measured.interval or (0.0, 0.0))[1])
    for name, candidate in passes.items():
        if name != "reference":
            print(row(name, passes["reference"], candidate, None if name in AA_ROWS else top.as_dict()))
    print(f"A/A noise the judgement used: the largest A/A interval top, {(top.interval or (0.0, 0.0))[1]:.4f}")
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        for name, candidate in passes.items():
            (args.keep / f"{name.replace(' ', '_').replace(',', '')}.json").write_text(json.dumps(candidate) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
