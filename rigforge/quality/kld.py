"""A candidate's quality pass against the reference's: top-k KL divergence, same top token, first divergence.

Per position both sides saw the same context (teacher forcing, or greedy kept on the reference's path by
re-synchronisation: rigforge/bench/quality.py). At each position:

- **KLD** (Kullback-Leibler divergence of the candidate from the reference, in nats), a top-k approximation: the
  reference's top-k tokens plus one bucket for all the rest. It is a **lower bound** of the full-vocabulary KLD
  (llama.cpp's ``--kl-divergence``): merging tokens into one bucket can only lose divergence, and a token of the
  reference's top-k that the candidate did not list gets the candidate's lowest listed logprob (the most it can
  be). Measured on the sandbox against the exact full-vocabulary KLD of the same positions it reads 0.3-0.9x the
  truth (docs/bench.md#how-low-the-top-k-kld-reads), so rigforge/quality/judge.py says "same" only on the bound
  that accounts for it, and reports the **rest mass** (what the reference's top-k leave to the bucket).
- **same top token**: the candidate's most likely token is the reference's.

Both sides are compared at the **common k**: a pass listing more tokens than the other is cut to the other's k
(the rest bucket takes the difference), since a reference of 20 against a candidate of 8 would put 12 of its
tokens at the candidate's floor (0.6-1.3 nats of false divergence). The mean carries its 95 % interval
(rigforge/quality/interval.py: texts and positions resampled); each position's KLD is kept (``position_kld``)
for a paired comparison. Teacher-forced passes score each text's second half only (llama-perplexity's rule:
early positions see too little context to say much about the model); a greedy pass's positions all follow the
whole text.

The first position where the top tokens differ is the **first divergence**. A pass that cannot be compared —
another corpus or method, another tokenizer (other token ids for the same text), no steps — is refused with the
reason, never scored.

Example::

    measured = compare_passes(reference_pass, candidate_pass)
    measured.refused or f"{measured.mean_kld:.4f} {measured.interval}"
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rigforge.quality.interval import mean_interval

#: The smallest probability a bucket is given (a log of 0 is not a number).
TINY = 1e-10


@dataclass(frozen=True)
class QualityMeasure:
    """A candidate pass against the reference's: the numbers, or why there are none (``refused``)."""

    mean_kld: float | None = None
    p99_kld: float | None = None
    same_top_percent: float | None = None
    positions: int = 0
    first_divergence: str | None = None
    refused: str | None = None
    text_kld: Mapping[str, float] = field(default_factory=dict)  # mean KLD per text
    skipped: tuple[str, ...] = ()  # texts or positions left out, and why
    interval: tuple[float, float] | None = None  # the mean's 95 % interval (rigforge/quality/interval.py)
    top_k: int | None = None  # the k both sides were compared at
    rest_mass: float | None = None  # the mean probability the reference's top-k leave to the rest bucket
    rest_p90: float | None = None
    position_kld: Mapping[str, list[float | None]] = field(default_factory=dict)  # per text, per position

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (report.json, the bench result's ``quality.against_reference``)."""
        return {"mean_kld": self.mean_kld, "p99_kld": self.p99_kld, "same_top_percent": self.same_top_percent,
                "positions": self.positions, "first_divergence": self.first_divergence, "refused": self.refused,
                "text_kld": dict(self.text_kld), "skipped": list(self.skipped),
                "interval": None if self.interval is None else list(self.interval), "top_k": self.top_k,
                "rest_mass": self.rest_mass, "rest_p90": self.rest_p90,
                "position_kld": {text: list(values) for text, values in self.position_kld.items()}}


def position_kld(reference: Sequence[Sequence[float]], candidate: Sequence[Sequence[float]]) -> float | None:
    """Top-k KLD(reference || candidate) at one position from ``[[token id, logprob], …]`` lists (None: a side
    listed nothing).

    >>> round(position_kld([[1, math.log(0.6)], [2, math.log(0.3)]], [[1, math.log(0.6)], [2, math.log(0.3)]]), 6)
    0.0
    >>> round(position_kld([[1, math.log(0.9)]], [[2, math.log(0.5)], [1, math.log(0.4)]]), 4)
    0.5507
    """
    if not reference or not candidate:
        return None
    listed = {int(token): float(logprob) for token, logprob in candidate}
    floor = min(listed.values())
    ref_p = [math.exp(float(logprob)) for _, logprob in reference]
    cand_p = [math.exp(listed.get(int(token), floor)) for token, _ in reference]
    scale = max(1.0, sum(cand_p) / (1.0 - TINY))  # imputed tokens may overfill the candidate's mass
    cand_p = [value / scale for value in cand_p]
    ref_rest, cand_rest = max(1.0 - sum(ref_p), TINY), max(1.0 - sum(cand_p), TINY)
    total = sum(p * (math.log(p) - math.log(max(q, TINY))) for p, q in zip(ref_p, cand_p, strict=True) if p > 0)
    return max(0.0, total + ref_rest * math.log(ref_rest / cand_rest))


def rest_mass(top: Sequence[Sequence[float]]) -> float:
    """The probability the listed tokens leave to the rest of the vocabulary (the rest bucket's mass).

    >>> round(rest_mass([[1, math.log(0.6)], [2, math.log(0.3)]]), 6)
    0.1
    """
    return max(0.0, 1.0 - sum(math.exp(float(logprob)) for _, logprob in top))


def percentile(values: Sequence[float], percent: float) -> float:
    """Nearest-rank percentile.

    >>> percentile([0.1, 0.2, 0.3, 0.4], 99)
    0.4
    """
    ordered = sorted(values)
    rank = max(1, math.ceil(percent / 100.0 * len(ordered)))
    return ordered[rank - 1]


def _token(step: Mapping[str, Any]) -> str:
    """``' the' (p 0.41)``: a position's most likely token, as text where the engine said it, else its id."""
    token, logprob = step["top"][0]
    said = step.get("text") if int(token) == step.get("token") else None
    name = repr(said) if said is not None else f"id {int(token)}"
    return f"{name} (p {math.exp(logprob):.2f})"


def refusal(reference: Mapping[str, Any], candidate: Mapping[str, Any]) -> str | None:
    """Why two passes cannot be compared at all (another corpus, engine method), None when they can."""
    for key in ("corpus", "method"):
        if reference.get(key) != candidate.get(key):
            return (f"the reference was measured with {key} {reference.get(key)!r}, this run with "
                    f"{candidate.get(key)!r}: not comparable")
    return None


def tokenizer_mismatch(text_id: str, reference: Sequence[int], candidate: Sequence[int]) -> str | None:
    """Why one text's prompt tokens differ (another tokenizer), None when they are the same.

    >>> tokenizer_mismatch("t", [2, 10, 11], [2, 10, 12])
    "text t: the candidate's tokenizer gives other token ids (first at token 2: 11 in the reference, 12 here): \
another tokenizer or model, and KLD needs the same vocabulary"
    """
    if list(reference) == list(candidate):
        return None
    at = next((index for index, (a, b) in enumerate(zip(reference, candidate, strict=False)) if a != b),
              min(len(reference), len(candidate)))
    ours = reference[at] if at < len(reference) else "the end"
    theirs = candidate[at] if at < len(candidate) else "the end"
    return (f"text {text_id}: the candidate's tokenizer gives other token ids (first at token {at}: {ours} in the "
            f"reference, {theirs} here): another tokenizer or model, and KLD needs the same vocabulary")


def listed_k(passed: Mapping[str, Any]) -> int:
    """How many tokens a pass lists per position: its ``top_k``, else (a pass from before it was kept) the longest
    list it holds.

    >>> listed_k({"top_k": 20, "texts": []}), listed_k({"texts": [{"steps": [{"top": [[1, -0.1], [2, -3.0]]}]}]})
    (20, 2)
    """
    if isinstance(passed.get("top_k"), int) and passed["top_k"] > 0:
        return int(passed["top_k"])
    return max((len(step.get("top") or []) for text in passed.get("texts") or [] for step in text.get("steps") or []),
               default=0)


def common_k(reference: Mapping[str, Any], candidate: Mapping[str, Any]) -> tuple[int, str | None]:
    """(the k both passes are compared at, the line saying one was cut to it; None when they listed the same k).

    >>> common_k({"top_k": 20, "texts": []}, {"top_k": 8, "texts": []})
    (8, 'top_k: the reference listed 20 tokens a position, the candidate 8: compared at the common 8 (the rest \
bucket takes the difference)')
    """
    ours, theirs = listed_k(reference), listed_k(candidate)
    if ours == theirs:
        return ours, None
    return min(ours, theirs), (f"top_k: the reference listed {ours} tokens a position, the candidate {theirs}: "
                               f"compared at the common {min(ours, theirs)} (the rest bucket takes the difference)")


def first_scored(passed: Mapping[str, Any], text: Mapping[str, Any]) -> int:
    """The first step scored: a teacher-forced text's second half (step i follows i + 1 prompt tokens), a greedy
    pass's first step (every step follows the whole text).

    >>> first_scored({"method": "forced"}, {"prompt_ids": list(range(11))}), first_scored({"method": "greedy"}, {})
    (4, 0)
    """
    if passed.get("method") != "forced":
        return 0
    return max(0, len(text.get("prompt_ids") or []) // 2 - 1)


def compare_passes(reference: Mapping[str, Any], candidate: Mapping[str, Any]) -> QualityMeasure:
    """Every text of ``candidate`` against the same text of ``reference`` (bench results' ``quality`` blocks).

    + reference: the reference's pass (its tokens are the path both followed)
    + candidate: the pass to judge
    """
    refused = refusal(reference, candidate)
    if refused:
        return QualityMeasure(refused=refused)
    k, cut = common_k(reference, candidate)
    theirs = {text["id"]: text for text in candidate.get("texts") or []}
    per_text: dict[str, list[float]] = {}
    per_position: dict[str, list[float | None]] = {}
    rests: list[float] = []
    same = 0
    first: str | None = None
    skipped: list[str] = [cut] if cut else []
    for ours in reference.get("texts") or []:
        text = theirs.get(ours["id"])
        if text is None or text.get("error") or not text.get("steps"):
            skipped.append(f"{ours['id']}: {'not measured' if text is None else text.get('error') or 'no steps'}")
            continue
        mismatch = tokenizer_mismatch(ours["id"], ours.get("prompt_ids") or [], text.get("prompt_ids") or [])
        if mismatch:
            return QualityMeasure(refused=mismatch)
        start = first_scored(reference, ours)
        values: list[float] = []
        positions: list[float | None] = []
        for index, (ref_step, step) in enumerate(zip(ours["steps"], text["steps"], strict=False)):
            ref_top, top = (ref_step.get("top") or [])[:k], (step.get("top") or [])[:k]
            value = position_kld(ref_top, top) if index >= start else None
            positions.append(None if value is None else round(value, 6))
            if value is None:
                if index >= start:
                    skipped.append(f"{ours['id']} token {index}: no top-k listed")
                continue
            values.append(value)
            rests.append(rest_mass(ref_top))
            top_same = int(ref_top[0][0]) == int(top[0][0])
            same += top_same
            if not top_same and first is None:
                first = (f"{ours['id']} token {index}: reference {_token(ref_step)}, candidate "
                         f"{_token(step)}")
        if start:
            skipped.append(f"{ours['id']}: tokens 0-{start - 1} not scored (too little context)")
        if len(text["steps"]) < len(ours["steps"]):
            skipped.append(f"{ours['id']}: {len(text['steps'])} of {len(ours['steps'])} positions measured")
        if values:
            per_text[ours["id"]] = values
            per_position[ours["id"]] = positions
    klds = [value for values in per_text.values() for value in values]
    if not klds:
        return QualityMeasure(refused="no position could be compared: " + "; ".join(skipped[:3]),
                              skipped=tuple(skipped))
    return QualityMeasure(sum(klds) / len(klds), percentile(klds, 99), 100.0 * same / len(klds), len(klds), first,
                          None, {text: sum(values) / len(values) for text, values in per_text.items()},
                          tuple(skipped), mean_interval(per_text), k, round(sum(rests) / len(rests), 4),
                          round(percentile(rests, 90), 4), per_position)
