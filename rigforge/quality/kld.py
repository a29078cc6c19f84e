"""A candidate's quality pass against the reference's: top-k KL divergence, same top token, first divergence.

Per position both sides saw the same context (teacher forcing, or greedy kept on the reference's path by
re-synchronisation: rigforge/bench/quality.py). At each position:

- **KLD** (Kullback-Leibler divergence of the candidate from the reference, in nats), a top-k approximation: the
  reference's top-k tokens plus one bucket for all the rest. A token of the reference's top-k that the candidate
  did not list gets the candidate's lowest listed logprob (the most it can be), so that term is understated, never
  overstated. 0 means the same distribution; llama.cpp's ``--kl-divergence`` reports the full-vocabulary form.
- **same top token**: the candidate's most likely token is the reference's.

The first position where the top tokens differ is the **first divergence**. A pass that cannot be compared —
another corpus or method, another tokenizer (other token ids for the same text), no steps — is refused with the
reason, never scored.

Example::

    measured = compare_passes(reference_pass, candidate_pass)
    measured.refused or f"{measured.mean_kld:.4f}"
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (report.json, the bench result's ``quality.against_reference``)."""
        return {"mean_kld": self.mean_kld, "p99_kld": self.p99_kld, "same_top_percent": self.same_top_percent,
                "positions": self.positions, "first_divergence": self.first_divergence, "refused": self.refused,
                "text_kld": dict(self.text_kld), "skipped": list(self.skipped)}


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


def compare_passes(reference: Mapping[str, Any], candidate: Mapping[str, Any]) -> QualityMeasure:
    """Every text of ``candidate`` against the same text of ``reference`` (bench results' ``quality`` blocks).

    + reference: the reference's pass (its tokens are the path both followed)
    + candidate: the pass to judge
    """
    refused = refusal(reference, candidate)
    if refused:
        return QualityMeasure(refused=refused)
    theirs = {text["id"]: text for text in candidate.get("texts") or []}
    klds: list[float] = []
    text_kld: dict[str, float] = {}
    same = 0
    first: str | None = None
    skipped: list[str] = []
    for ours in reference.get("texts") or []:
        text = theirs.get(ours["id"])
        if text is None or text.get("error") or not text.get("steps"):
            skipped.append(f"{ours['id']}: {'not measured' if text is None else text.get('error') or 'no steps'}")
            continue
        mismatch = tokenizer_mismatch(ours["id"], ours.get("prompt_ids") or [], text.get("prompt_ids") or [])
        if mismatch:
            return QualityMeasure(refused=mismatch)
        values: list[float] = []
        for index, (ref_step, step) in enumerate(zip(ours["steps"], text["steps"], strict=False)):
            value = position_kld(ref_step.get("top") or [], step.get("top") or [])
            if value is None:
                skipped.append(f"{ours['id']} token {index}: no top-k listed")
                continue
            values.append(value)
            top_same = int(ref_step["top"][0][0]) == int(step["top"][0][0])
            same += top_same
            if not top_same and first is None:
                first = (f"{ours['id']} token {index}: reference {_token(ref_step)}, candidate "
                         f"{_token(step)}")
        if len(text["steps"]) < len(ours["steps"]):
            skipped.append(f"{ours['id']}: {len(text['steps'])} of {len(ours['steps'])} positions measured")
        if values:
            text_kld[ours["id"]] = sum(values) / len(values)
            klds += values
    if not klds:
        return QualityMeasure(refused="no position could be compared: " + "; ".join(skipped[:3]),
                              skipped=tuple(skipped))
    return QualityMeasure(sum(klds) / len(klds), percentile(klds, 99), 100.0 * same / len(klds), len(klds), first,
                          None, text_kld, tuple(skipped))
