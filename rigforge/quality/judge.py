"""Where a run's answers stand against the model's reference: same, differ, or cannot tell.

A bench result's ``quality.against_reference`` (written by roles/quality.py) holds the pass against the model's
reference and the reference's own A/A noise. Answers **differ** when the mean top-k KLD is past both the profile's
``bench.quality.max_mean_kld`` and the noise (NOISE_TIMES the A/A mean KLD, as a speed claim must clear
rigforge/updates/verdict.py's noise); they are the **same** when the mean is inside the tolerance; otherwise (no
reference, a refused comparison, a KLD inside the noise but past the tolerance) quality **cannot tell**.
A graded task score, where the profile has one (rigforge/quality/tasks.py), adds one rule: a score that dropped
past ``bench.quality.task_score.max_drop_points`` makes the answers **differ** whatever the KLD says; a score
that is the same or cannot tell leaves the KLD's judgement and adds its line. rigforge/recipes/quality_veto.py
lays this over a tournament's speed verdict.

Example::

    judged = judge_quality(result.get("quality"))
    judged.state, judged.line       # ('differ', 'answers differ (mean KLD 0.043 > 0.01, ...)')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

SAME_ANSWERS, DIFFER, UNKNOWN, OFF = "same", "differ", "cannot tell", "off"
#: How many times the reference's own A/A mean KLD a difference must exceed.
NOISE_TIMES = 2.0


@dataclass(frozen=True)
class QualityJudgement:
    """Where a run's answers stand against the reference, and the line that says so."""

    state: str
    line: str
    mean_kld: float | None = None
    p99_kld: float | None = None
    same_top_percent: float | None = None
    noise_kld: float | None = None


def _numbers(measured: Mapping[str, Any]) -> str:
    return (f"mean KLD {measured['mean_kld']:.4f}, p99 {measured['p99_kld']:.3f}, same top token "
            f"{measured['same_top_percent']:.1f} % over {measured['positions']} tokens")


def judge_quality(quality: Mapping[str, Any] | None) -> QualityJudgement:
    """The judgement of one bench result's ``quality`` block (None: the bench ran no quality pass).

    >>> against = {"mean_kld": 0.043, "p99_kld": 0.24, "same_top_percent": 82.8, "positions": 128,
    ...            "refused": None, "tolerance": 0.01, "noise": {"mean_kld": 0.0007}}
    >>> judge_quality({"against_reference": against}).line
    'answers differ (mean KLD 0.0430, p99 0.240, same top token 82.8 % over 128 tokens; past the tolerance 0.01 and \
2x the A/A noise 0.0007)'
    """
    if not quality:
        return QualityJudgement(OFF, "no quality pass")
    judged = _judge_kld(quality)
    tasks = (quality.get("against_reference") or {}).get("task_score")
    if not tasks:
        return judged
    if tasks["state"] == DIFFER:  # a score that dropped past its tolerance: the answers differ, whatever the KLD
        return replace(judged, state=DIFFER, line=f"answers differ ({tasks['line']}); {judged.line}")
    return replace(judged, line=f"{judged.line}; {tasks['line']}")


def _judge_kld(quality: Mapping[str, Any]) -> QualityJudgement:
    """The judgement of the pass's top-k KLD against the reference (the module's rule)."""
    against = quality.get("against_reference") or {}
    if against.get("recorded"):
        return QualityJudgement(UNKNOWN, "quality: this run recorded the reference (nothing to compare yet)")
    if not against or against.get("refused") or against.get("mean_kld") is None:
        why = against.get("refused") or "no reference for this model to compare with"
        return QualityJudgement(UNKNOWN, f"quality cannot tell: {why}")
    tolerance = float(against["tolerance"])
    noise = (against.get("noise") or {}).get("mean_kld")
    mean = float(against["mean_kld"])
    numbers = dict(mean_kld=mean, p99_kld=against["p99_kld"], same_top_percent=against["same_top_percent"],
                   noise_kld=noise)
    floor = f"A/A noise {noise:.4f}" if noise is not None else "A/A noise not measured yet"
    if mean <= tolerance:
        return QualityJudgement(SAME_ANSWERS, f"answers same ({_numbers(against)}; within {tolerance:g}, "
                                              f"{floor})", **numbers)
    if noise is not None and mean > NOISE_TIMES * noise:
        first = against.get("first_divergence")
        return QualityJudgement(DIFFER, f"answers differ ({_numbers(against)}; past the tolerance {tolerance:g} and "
                                        f"{NOISE_TIMES:g}x the {floor})" + (f"; first: {first}" if first else ""),
                                **numbers)
    return QualityJudgement(UNKNOWN, f"quality cannot tell ({_numbers(against)}: past the tolerance {tolerance:g} "
                                     f"but not clear of the {floor})", **numbers)
