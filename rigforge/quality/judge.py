"""Where a run's answers stand against the model's reference: same, differ, or cannot tell.

A bench result's ``quality.against_reference`` (written by roles/quality.py) holds the pass against the model's
reference — the mean top-k KLD with its 95 % interval, the k and the rest-bucket mass (rigforge/quality/kld.py) —
and the reference's own A/A noise. The top-k KLD is a lower bound of the exact full-vocabulary KLD, measured at
``TOP_K_RATIO`` of it at worst on the sandbox (docs/bench.md#how-low-the-top-k-kld-reads), so:

- answers **differ** when the interval's *low* end is past both the profile's ``bench.quality.max_mean_kld`` and
  the A/A noise (the top of the A/A pass's own interval: a measured bound, where an older rule took twice its
  mean). The lower bound is safe there: the truth is at least as far.
- answers are the **same** when the interval's *high* end is within ``TOP_K_RATIO[k]`` times the tolerance — the
  tolerance as the top-k figure reads it — and the reference's rest bucket holds no more than ``MAX_REST_MASS``
  on average (past the measured range, the rest could hide any divergence: "cannot tell").
- otherwise — no reference, a refused comparison, an interval across the bounds, a k below the calibrated ones —
  quality **cannot tell**. Against an **imported** reference (another checkpoint or rig: every recipe sits at the
  checkpoints' gap) one pass never says "differ"; a tournament judges the gap against the start recipe's
  (rigforge/quality/over_starts.py).

A graded task score, where the profile has one (rigforge/quality/tasks.py), adds one rule: a score that dropped
past ``bench.quality.task_score.max_drop_points`` makes the answers **differ** whatever the KLD says; a score
that is the same or cannot tell leaves the KLD's judgement and adds its line. rigforge/recipes/quality_veto.py
lays this over a tournament's speed verdict.

Example::

    judged = judge_quality(result.get("quality"))
    judged.state, judged.line       # ('differ', 'answers differ (mean KLD 0.0430 [0.0310, 0.0570], ...)')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

SAME_ANSWERS, DIFFER, UNKNOWN, OFF = "same", "differ", "cannot tell", "off"
#: Per k, the lowest ratio of the mean top-k KLD to the exact full-vocabulary mean KLD at the same positions,
#: measured on the sandbox's recipes and models (measurements/quality_kld_calibration.py, docs/bench.md#how-low-the-
#: top-k-kld-reads: k 8 0.36-0.56, k 20 0.50-0.69), rounded down: the tolerance, as the top-k figure reads it, is
#: the tolerance times this. A k between two is given the lower k's ratio; a k below the lowest is not calibrated.
TOP_K_RATIO = {8: 0.35, 20: 0.5}
#: Per k, the largest mean rest-bucket mass the calibration's passes had (0.44 at k 8, 0.32 at k 20), rounded up:
#: past it the ratio was not measured, so the top-k figure cannot bound the truth ("cannot tell", never "same").
MAX_REST_MASS = {8: 0.45, 20: 0.35}


def calibrated_k(k: int | None) -> int | None:
    """The largest calibrated k at or below k (None: no k, or below every calibrated one).

    >>> calibrated_k(20), calibrated_k(12), calibrated_k(4)
    (20, 8, None)
    """
    known = [calibrated for calibrated in sorted(TOP_K_RATIO) if k is not None and calibrated <= k]
    return known[-1] if known else None


def noise_bound(noise: Mapping[str, Any] | None) -> float | None:
    """The A/A noise a difference must clear: the top of the A/A pass's interval, its mean where it has none.

    >>> noise_bound({"mean_kld": 0.001, "interval": [0.0004, 0.0019]}), noise_bound({"mean_kld": 0.001})
    (0.0019, 0.001)
    """
    if not noise or noise.get("mean_kld") is None:
        return None
    interval = noise.get("interval")
    return float(interval[1]) if interval else float(noise["mean_kld"])


def is_imported(against: Mapping[str, Any]) -> bool:
    """Whether the reference was imported (another checkpoint or rig), not recorded here: its ``imported`` flag, or in
    a result from before the flag, no reference recipe here and a source that says so.

    >>> is_imported({"imported": True}), is_imported({"reference_recipe": None, "reference_source": "imported …"})
    (True, True)
    """
    if "imported" in against:
        return bool(against["imported"])
    return against.get("reference_recipe") is None and str(against.get("reference_source") or "").startswith(
        "imported")


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
    interval = measured.get("interval")
    spread = f" [{interval[0]:.4f}, {interval[1]:.4f}]" if interval else ""
    rest = (f", top-{measured['top_k']} rest mass {measured['rest_mass']:.2f}"
            if measured.get("rest_mass") is not None and measured.get("top_k") else "")
    return (f"mean KLD {measured['mean_kld']:.4f}{spread}, p99 {measured['p99_kld']:.3f}, same top token "
            f"{measured['same_top_percent']:.1f} % over {measured['positions']} tokens{rest}")


def judge_quality(quality: Mapping[str, Any] | None) -> QualityJudgement:
    """The judgement of one bench result's ``quality`` block (None: the bench ran no quality pass).

    >>> against = {"mean_kld": 0.043, "p99_kld": 0.24, "same_top_percent": 82.8, "positions": 128,
    ...            "interval": [0.031, 0.057], "refused": None, "tolerance": 0.01, "noise": {"mean_kld": 0.0007}}
    >>> judge_quality({"against_reference": against}).line
    'answers differ (mean KLD 0.0430 [0.0310, 0.0570], p99 0.240, same top token 82.8 % over 128 tokens; the \
interval past the tolerance 0.01 and the A/A noise 0.0007)'
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
    state, why = kld_state(against)
    mean = float(against["mean_kld"])
    numbers = dict(mean_kld=mean, p99_kld=against["p99_kld"], same_top_percent=against["same_top_percent"],
                   noise_kld=noise_bound(against.get("noise")))
    head = {SAME_ANSWERS: "answers same", DIFFER: "answers differ", UNKNOWN: "quality cannot tell"}[state]
    first = against.get("first_divergence") if state == DIFFER else None
    return QualityJudgement(state, f"{head} ({_numbers(against)}; {why})" + (f"; first: {first}" if first else ""),
                            **numbers)


def kld_state(against: Mapping[str, Any]) -> tuple[str, str]:
    """(state, why) of a comparison's mean KLD and interval against its tolerance, k, rest mass and noise.

    + against: ``mean_kld``, ``interval`` (the mean's alone where a result from before intervals has none),
      ``tolerance``, ``top_k``, ``rest_mass``, ``noise`` (its ``mean_kld`` and ``interval``), ``imported``

    >>> kld_state({"mean_kld": 0.002, "interval": [0.001, 0.003], "tolerance": 0.01, "top_k": 20,
    ...            "rest_mass": 0.2, "noise": {"mean_kld": 0.0}})
    ('same', 'the interval within 0.5 x the tolerance 0.01 = 0.005 (the top-20 KLD reads as low as 0.5x the exact)')
    """
    tolerance = float(against["tolerance"])
    low, high = against.get("interval") or (against["mean_kld"], against["mean_kld"])
    noise = noise_bound(against.get("noise"))
    floor = f"the A/A noise {noise:.4f}" if noise is not None else "the A/A noise (not measured yet)"
    k, rest = against.get("top_k"), against.get("rest_mass")
    calibrated = calibrated_k(k) if k is not None else min(TOP_K_RATIO)  # a result from before k was kept: as 8
    if low > tolerance:
        if is_imported(against):
            return UNKNOWN, (f"past the tolerance {tolerance:g} of an imported reference, where every recipe sits at "
                             "the checkpoints' gap: judged against the start recipe's gap in a tournament")
        if noise is not None and low > noise:
            return DIFFER, f"the interval past the tolerance {tolerance:g} and {floor}"
        return UNKNOWN, f"past the tolerance {tolerance:g} but not clear of {floor}"
    if calibrated is None:
        return UNKNOWN, (f"top-{k} is below every calibrated k ({', '.join(map(str, sorted(TOP_K_RATIO)))}): how low "
                         "it reads is not known, so no 'same'")
    ratio, most = TOP_K_RATIO[calibrated], MAX_REST_MASS[calibrated]
    bound = tolerance * ratio
    if rest is not None and rest > most:
        return UNKNOWN, (f"the rest bucket holds {rest:.2f} of the probability, past the {most:g} the top-{calibrated} "
                         "calibration measured: the top-k figure cannot bound the truth there")
    said = f"{ratio:g} x the tolerance {tolerance:g} = {bound:.4g} (the top-{k or min(TOP_K_RATIO)} KLD reads as " \
           f"low as {ratio:g}x the exact)"
    if high <= bound:
        return SAME_ANSWERS, f"the interval within {said}"
    return UNKNOWN, f"the interval not within {said}, nor past the tolerance"
