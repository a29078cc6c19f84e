"""How often the quality judgement says "same" or "differ" wrongly, by simulation through the project's own functions.

Each draw makes a reference pass, a candidate pass and an A/A pass (the reference recipe again) of the sandbox's
shape — 4 texts x 32 positions, the top-20 log-probabilities a position — from whole distributions whose exact
full-vocabulary KLD is known, and judges the candidate exactly as a bench does: rigforge/quality/kld.py's
``compare_passes`` (top-k KLD, rest mass, bootstrap interval), rigforge/quality/reference.py's ``against_block``
(the A/A pass as the reference's noise) and rigforge/quality/judge.py's ``judge_quality``.

The distributions: per position the reference's logits are Gaussian over a 2,048-token vocabulary with a scale
drawn per position (a reference's top 20 then leave a median ~0.3 of the probability to the rest, as the sandbox's
models do: docs/bench.md#how-low-the-top-k-kld-reads); a recipe adds Gaussian noise to the logits whose size varies
per text (lognormal, sigma 0.4) and per position (lognormal, sigma 0.5). That tail is heavier than any measured: the
top 8 % of positions carry ~0.45 of the KLD's sum (the sandbox's kv-q4 fixture 0.33, the calibration's passes
0.15-0.36), its mean 2.4x its median (measured 1.1-2.1). The noise's overall size is set by bisection on 2,000
positions so the recipe's exact mean KLD is the target. Scenarios (``--draws`` each):

- a recipe at 1.5x the tolerance (exact 0.015 against 0.01), the A/A at 0.0005: "same" must be <= 5 %;
- an identical recipe (the candidate drawn as the A/A is: the reference recipe again) with A/A noise at 0.1x, 1x and
  2x the tolerance: "differ" must be <= 5 %;
- for the power: a recipe at 0.2x the tolerance ("same" wanted) and at 3x ("differ" wanted).

Prints per scenario the share of draws judged same / differ / cannot tell with a 95 % Wilson interval, and the
simulated top-20 / exact ratio. docs/bench.md#the-judgement-on-its-interval quotes a run. No server: CPU only, a few
minutes on a 2-core machine.

    .venv/bin/python measurements/quality_verdict_simulation.py [--draws 200] [--seed 1]
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rigforge.quality.judge import DIFFER, SAME_ANSWERS, UNKNOWN, judge_quality  # noqa: E402
from rigforge.quality.kld import compare_passes  # noqa: E402
from rigforge.quality.reference import against_block  # noqa: E402

VOCABULARY = 2048
TEXTS, POSITIONS, TOP_K = 4, 32, 20
TOLERANCE = 0.01
QUIET = 0.0005  # the A/A of a quiet engine (a GPU's kernels between starts)


def reference_logits(generator: np.random.Generator, count: int) -> np.ndarray:
    """``count`` positions of reference log-probabilities, each with its own sharpness."""
    scale = generator.uniform(2.2, 4.2, size=(count, 1))
    return normalised(generator.standard_normal((count, VOCABULARY)) * scale)


def multipliers(generator: np.random.Generator, count: int) -> np.ndarray:
    """Per position, how much noise it gets: lognormal per text (sigma 0.4) times lognormal per position (sigma 0.5)."""
    per_text = np.repeat(generator.lognormal(0.0, 0.4, size=math.ceil(count / POSITIONS)), POSITIONS)[:count]
    return per_text * generator.lognormal(0.0, 0.5, size=count)


def perturbed(generator: np.random.Generator, reference: np.ndarray, size: float) -> np.ndarray:
    """A recipe's log-probabilities: the reference's plus noise, heavier at some texts and positions."""
    noise = generator.standard_normal(reference.shape) * (size * multipliers(generator, reference.shape[0]))[:, None]
    return normalised(reference + noise)


def normalised(logits: np.ndarray) -> np.ndarray:
    return logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)


def exact_kld(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """Per position, the full-vocabulary KLD(reference || candidate)."""
    return np.sum(np.exp(reference) * (reference - candidate), axis=1)


@functools.cache
def noise_for(target: float) -> float:
    """The noise size whose exact mean KLD over 2,000 positions is ``target`` (bisection on one fixed draw)."""
    generator = np.random.default_rng(12345)
    reference = reference_logits(generator, 2_000)
    shape = generator.standard_normal(reference.shape) * multipliers(generator, reference.shape[0])[:, None]
    low, high = 0.0, 2.0
    for _ in range(22):
        middle = (low + high) / 2
        mean = float(np.mean(exact_kld(reference, normalised(reference + middle * shape))))
        low, high = (middle, high) if mean < target else (low, middle)
    return (low + high) / 2


def as_pass(logprobs: np.ndarray) -> dict[str, Any]:
    """A greedy pass of the simulated positions, as the bench writes one (top-20 a position)."""
    order = np.argsort(-logprobs, axis=1)[:, :TOP_K]
    texts = []
    for text in range(TEXTS):
        rows = range(text * POSITIONS, (text + 1) * POSITIONS)
        steps = [{"token": int(order[row, 0]), "top": [[int(token), float(logprobs[row, token])]
                                                        for token in order[row]]} for row in rows]
        texts.append({"id": f"t{text}", "prompt_ids": [1, 2, 3], "steps": steps})
    return {"corpus": "simulated", "method": "greedy", "top_k": TOP_K, "texts": texts}


def judged(reference: dict[str, Any], candidate: dict[str, Any], again: dict[str, Any]) -> tuple[str, float]:
    """(the bench's judgement of ``candidate``, its mean top-k KLD), the reference's noise measured by ``again``."""
    noise = compare_passes(reference, again).as_dict()
    stored = {"recipe": "default", "run": "simulated", "noise": noise}
    measured = compare_passes(reference, candidate).as_dict()
    against = against_block(stored, "simulated", measured, TOLERANCE)
    return judge_quality({"against_reference": against}).state, float(measured["mean_kld"])


def wilson(hits: int, total: int) -> tuple[float, float]:
    """95 % Wilson interval of a share, in percent."""
    if total == 0:
        return 0.0, 100.0
    z, share = 1.96, hits / total
    centre = (share + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(share * (1 - share) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return 100 * max(0.0, centre - half), 100 * min(1.0, centre + half)


def scenario(name: str, candidate_kld: float | None, aa_kld: float, draws: int, seed: int) -> str:
    """One scenario's line; ``candidate_kld`` None: the candidate is the reference recipe again (drawn as the A/A)."""
    generator = np.random.default_rng(seed)
    aa_size = noise_for(aa_kld)
    size = aa_size if candidate_kld is None else noise_for(candidate_kld)
    states: Counter[str] = Counter()
    ratios = []
    for _ in range(draws):
        reference = reference_logits(generator, TEXTS * POSITIONS)
        candidate = perturbed(generator, reference, size)
        again = perturbed(generator, reference, aa_size)
        state, mean = judged(as_pass(reference), as_pass(candidate), as_pass(again))
        states[state] += 1
        exact = float(np.mean(exact_kld(reference, candidate)))
        if exact > 0:
            ratios.append(mean / exact)
    shares = []
    for state in (SAME_ANSWERS, DIFFER, UNKNOWN):
        low, high = wilson(states[state], draws)
        shares.append(f"{state} {100 * states[state] / draws:.1f} % [{low:.1f}, {high:.1f}]")
    return f"{name}: {'; '.join(shares)}; top-{TOP_K} / exact {float(np.median(ratios)):.2f} (median of draws)"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    print(f"{args.draws} draws a scenario; {TEXTS} texts x {POSITIONS} positions, top-{TOP_K} of {VOCABULARY} tokens, "
          f"tolerance {TOLERANCE}")
    rows = [("recipe at 1.5x the tolerance (exact 0.015), A/A 0.0005: 'same' must be <= 5 %", 1.5 * TOLERANCE, QUIET),
            ("identical recipe, A/A 2x the tolerance: 'differ' must be <= 5 %", None, 2 * TOLERANCE),
            ("identical recipe, A/A 1x the tolerance: 'differ' must be <= 5 %", None, TOLERANCE),
            ("identical recipe, A/A 0.1x the tolerance: 'differ' must be <= 5 %", None, 0.1 * TOLERANCE),
            ("recipe at 0.2x the tolerance (exact 0.002), A/A 0.0005: power to say 'same'", 0.2 * TOLERANCE, QUIET),
            ("recipe at 3x the tolerance (exact 0.03), A/A 0.0005: power to say 'differ'", 3 * TOLERANCE, QUIET)]
    for number, (name, candidate_kld, aa_kld) in enumerate(rows):
        print(scenario(name, candidate_kld, aa_kld, args.draws, args.seed + number), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
