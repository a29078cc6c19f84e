"""Seeded synthetic bench results with a profile's own cells, metrics and repeats, for calibrating verdicts.

SYNTHETIC, labelled as such: each repeat's value of each metric is log-normal around a fixed level with the
given relative noise (the model Welch's test on log values assumes); a shift multiplies every judged metric of the
"after" side in its better direction. Real runs also drift and have slow repeats: the e2e A/A tournaments on a
sandbox host (measurements/recipes_aa.py) test that part.

Example::

    rates = claim_rates(load_profile("4x-threadripper"), noise=0.02, shift=0.2, draws=1000, seed=7)
    rates.better                      # share of draws judged better
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass
from typing import Any

from rigforge.bench.config import COMPLETIONS
from rigforge.profile import Profile
from rigforge.updates.comparison import METRICS, RegressionPolicy
from rigforge.updates.verdict import BETTER, WORSE, Question, judge, overall

LEVEL = 100.0


def synthetic_result(profile: Profile, rng: random.Random, noise: float, shift: float = 0.0) -> dict[str, Any]:
    """One bench result of the profile's completion grid: ``bench.repeats`` repeats per cell, each metric
    log-normal with sd ``noise`` around LEVEL, moved ``shift`` (0.2: 20 %) in its better direction."""
    cells = []
    for concurrency in profile.bench.concurrency:
        for input_tokens in profile.bench.input_tokens:
            repeats = []
            for _ in range(profile.bench.repeats):
                block: dict[str, Any] = {}
                for metric in METRICS:
                    factor = (1 + shift) if metric.higher_is_better else 1 / (1 + shift)
                    value = LEVEL * factor * math.exp(rng.gauss(0.0, noise))
                    if metric.stat is None:
                        block[metric.key] = value
                    else:
                        block.setdefault(metric.key, {})[metric.stat] = value
                repeats.append(block)
            cells.append({"concurrency": concurrency, "input_tokens": input_tokens, "status": "ok",
                          "repeats": repeats, "metrics": repeats[0]})
    return {"cells": cells, "metadata": {}}


@dataclass(frozen=True)
class Rates:
    """Shares of draws judged each way."""

    better: float
    worse: float
    draws: int

    @property
    def claimed(self) -> float:
        """Better or worse: on identical distributions, every such claim is false."""
        return self.better + self.worse


def _repeats(rng: random.Random, count: int, noise: float, factor: float = 1.0) -> tuple[float, ...]:
    return tuple(LEVEL * factor * math.exp(rng.gauss(0.0, noise)) for _ in range(count))


def profile_questions(profile: Profile, rng: random.Random, noise: float, shift: float,
                      start_again: bool) -> list[Question]:
    """The questions a comparison of the profile's grid asks (every cell and metric a tolerance rule judges),
    answered by synthetic repeats: what ``compare`` builds from two such results, without the result files."""
    policy = RegressionPolicy.from_profile(profile)
    repeats = profile.bench.repeats
    questions = []
    for concurrency in profile.bench.concurrency:
        for input_tokens in profile.bench.input_tokens:
            for metric in METRICS:
                tolerance = policy.tolerance(metric.name, concurrency, input_tokens)
                if tolerance is None:
                    continue
                first = _repeats(rng, repeats, noise)
                again = _repeats(rng, repeats, noise) if start_again else ()
                drift = (statistics.median(again) / statistics.median(first) - 1) * 100 if again else None
                factor = (1 + shift) if metric.higher_is_better else 1 / (1 + shift)
                primary = policy.primary is not None and policy.primary.names(
                    (COMPLETIONS, concurrency, input_tokens), metric.name)
                questions.append(Question(first + again, _repeats(rng, repeats, noise, factor),
                                          metric.higher_is_better, tolerance, primary, drift))
    return questions


def claim_rates(profile: Profile, noise: float, shift: float, draws: int, seed: int,
                start_again: bool = True) -> Rates:
    """How often a comparison of the profile's grid says better / worse.

    + noise: relative sd of one repeat (0.02: GPU-like, 0.30: a loaded 2-core sandbox)
    + shift: the true change of the "after" side (0: an A/A test)
    + start_again: the start measured twice and pooled, as the recipe tournament does (False: a driver update)
    """
    rng = random.Random(seed)
    better = worse = 0
    for _ in range(draws):
        questions = profile_questions(profile, rng, noise, shift, start_again)
        primary = next((index for index, question in enumerate(questions) if question.primary), None)
        verdict, _ = overall(judge(questions, RegressionPolicy.from_profile(profile).false_claim_rate), primary)
        better += verdict == BETTER
        worse += verdict == WORSE
    return Rates(better / draws, worse / draws, draws)
