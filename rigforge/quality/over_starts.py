"""Where a recipe's answers stand against the model's reference over **every** engine start it was measured in.

A tournament measures each recipe in k engine starts, and GPU kernels are not bit-exact between starts, so one
start's pass is one sample of the recipe's answers, as one start's speed is one sample of its speed. The rule here
is rigforge/updates/verdict.py's in spirit — a claim must clear the noise, and "cannot tell" beats a guess:

- **differ** only when *every* start's pass was compared and *every* start's KLD interval lies past the profile's
  tolerance and the A/A noise (rigforge/quality/judge.py's rule, start by start);
- **same** only when every start's pass was compared and every start's interval is inside the tolerance as the
  top-k figure reads it (judge.py's ``TOP_K_RATIO``), its rest bucket within the calibrated range;
- **cannot tell** otherwise, naming the starts: one start past the tolerance among k (a start's unlucky kernels, or
  a real but rare change), a start without a pass, a refused or failed pass, a KLD inside the noise.

Why every start and not an interval across starts: the KLD is a distance from one fixed reference, not a rate
scattered around a mean, and the noise it must clear is measured directly (A/A passes of the reference recipe).
At the usual 3 starts a t interval has 2 degrees of freedom (4.3 standard errors at 97.5 %), and a deterministic
engine (llama.cpp on a CPU) repeats its pass bit for bit, so the interval would be either too wide to claim or
have no spread to measure. Requiring each start to clear the bar on its own is a claim that held k times in a
row, stricter against a false ``differ`` than one interval; a real change of the numerics (a 4-bit KV cache, another
checkpoint) moves every start's answers, so it loses nothing real.

The **A/A noise** a difference must clear is the largest one known: the top of the interval of the reference's
recorded noise (its recipe in a second engine start, rigforge/quality/reference.py), and — when the tournament's
starting recipe is the reference recipe — of that recipe's own pass in each of its starts (each is one more A/A of
the reference; a result from before intervals gives its mean). A start that recorded the reference is the
reference itself (nothing to compare) and is left out.

Against an **imported** reference (an FP8 or BF16 checkpoint's pass, another rig's) every recipe here sits at the
checkpoints' gap, the unchanged start recipe too, so an absolute tolerance would veto them all. There a recipe is
judged **relative to the start recipe**: position by position its KLD to the reference minus the start recipe's
(the mean over the start's starts; both passes kept on the reference's path, so the positions are the same), the
paired difference's interval (rigforge/quality/interval.py) judged by the same rule, the A/A noise being the
start's own starts' spread about their mean (measured from two starts on; one start measures none, so no
"differ"). The start recipe itself then differs from itself by its own noise only: never "differ".

Example::

    judged = judge_over_starts([trial_start_1, trial_start_2, trial_start_3], aa_starts=start_recipe_starts,
                               baseline_starts=start_recipe_starts)
    judged.state, judged.line     # ('differ', 'answers differ in all 3 starts (mean KLD 0.0450, 0.0451, 0.0449; …')
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rigforge.quality.interval import average_positions, mean_interval, paired_differences
from rigforge.quality.judge import (
    DIFFER,
    OFF,
    SAME_ANSWERS,
    UNKNOWN,
    is_imported,
    judge_quality,
    kld_state,
    noise_bound,
)

#: The state a start that recorded the reference is given (it is the reference: left out of the judgement).
RECORDED = "recorded"


@dataclass(frozen=True)
class StartsJudgement:
    """A recipe's answers over its starts: the state, the line that says why, and the numbers behind it.

    + state: same / differ / cannot tell / off (rigforge/quality/judge.py's states)
    + line: which starts said what, their mean KLDs, the tolerance and the noise cleared or not
    + per_start: each start's mean KLD (None where it had no comparable pass), in the order measured
    + noise_kld: the A/A noise the judgement used (None: not measured)
    + tolerance: the profile's ``bench.quality.max_mean_kld`` as the results carry it
    + reference: which reference the passes were compared with and where it came from (recorded or imported)
    """

    state: str
    line: str
    per_start: tuple[float | None, ...] = ()
    noise_kld: float | None = None
    tolerance: float | None = None
    reference: str | None = None

    @property
    def mean_kld(self) -> float | None:
        """The median of the starts' mean KLDs (the point the trade-off chart draws)."""
        values = [value for value in self.per_start if value is not None]
        return statistics.median(values) if values else None


def against_of(result: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A result's comparison with the reference (``quality.against_reference``), {} when it has none."""
    return ((result or {}).get("quality") or {}).get("against_reference") or {}


def noise_floor(starts: Sequence[Mapping[str, Any] | None], aa_starts: Sequence[Mapping[str, Any] | None]) -> \
        float | None:
    """The largest A/A bound known: the top of the interval of the reference's recorded noise as every start carries
    it, and of each of ``aa_starts``' pass (the reference recipe in other engine starts; its mean where a result
    has no interval). None when neither exists.

    >>> noise_floor([{"quality": {"against_reference": {"noise": {"mean_kld": 0.001, "interval": [0.0, 0.002]}}}}],
    ...             [{"quality": {"against_reference": {"mean_kld": 0.003}}}])
    0.003
    """
    values = [bound for result in (*starts, *aa_starts)
              if (bound := noise_bound(against_of(result).get("noise"))) is not None]
    values += [bound for result in aa_starts if not against_of(result).get("refused")
               and (bound := noise_bound(against_of(result))) is not None]
    return max(values) if values else None


def reference_words(against: Mapping[str, Any]) -> str | None:
    """``gemma…@a5fd (imported from /x/ref.json, checkpoint bf16, 2026-11-27T09:00Z)``: the reference a pass was
    compared with and where it came from (results from before the provenance was kept: its key alone)."""
    key = against.get("reference")
    if not key:
        return None
    source = against.get("reference_source")
    return f"{key} ({source})" if source else str(key)


def start_state(result: Mapping[str, Any] | None, floor: float | None) -> tuple[str, float | None, str]:
    """(state, mean KLD, why) of one start's pass, judged against the noise ``floor`` instead of its own copy."""
    quality = (result or {}).get("quality")
    if not quality:
        return OFF, None, "no quality pass"
    against = against_of(result)
    if against.get("recorded"):
        return RECORDED, None, "recorded the reference"
    if against and against.get("mean_kld") is not None:
        against = {**against, "noise": None if floor is None else {"mean_kld": floor}}
    judged = judge_quality({**quality, "against_reference": against})
    if judged.state == UNKNOWN and judged.mean_kld is not None:
        return UNKNOWN, judged.mean_kld, f"mean KLD {judged.mean_kld:.4f}: {kld_state(against)[1]}"
    return judged.state, judged.mean_kld, judged.line.removeprefix("quality cannot tell: ")


def relative_state(result: Mapping[str, Any] | None, baseline: Mapping[str, list[float | None]],
                   spread: float | None) -> tuple[str, float | None, str]:
    """(state, mean excess, why) of one start against an imported reference, relative to the start recipe:
    its per-position KLD minus the start recipe's mean at the same positions, judged by judge.py's rule with the
    start recipe's spread as the A/A noise."""
    against = against_of(result)
    if not (result or {}).get("quality"):
        return OFF, None, "no quality pass"
    if against.get("refused") or not against.get("position_kld"):
        return start_state(result, None)
    paired = paired_differences(against["position_kld"], baseline)
    if not paired:
        return UNKNOWN, None, "no position scored by both this pass and the start recipe's"
    values = [value for text in paired.values() for value in text]
    mean = sum(values) / len(values)
    relative = {**against, "imported": False, "mean_kld": mean, "interval": mean_interval(paired),
                "noise": None if spread is None else {"mean_kld": spread}}
    state, why = kld_state(relative)
    low, high = relative["interval"]
    return state, mean, (f"KLD to the imported reference {float(against['mean_kld']):.4f}, the start recipe's "
                         f"+{mean:.4f} [{low:.4f}, {high:.4f}]: {why}")


def start_baseline(baseline_starts: Sequence[Mapping[str, Any] | None]) -> \
        tuple[dict[str, list[float | None]], float | None] | None:
    """(the start recipe's per-position KLD to the imported reference, averaged over its starts; the top of the
    largest interval of one start's difference from that average — its A/A, None from one start), or None when no
    start of it has a comparable pass."""
    passes = [against_of(result)["position_kld"] for result in baseline_starts
              if against_of(result).get("position_kld") and not against_of(result).get("refused")]
    if not passes:
        return None
    averaged = average_positions(passes)
    if len(passes) < 2:
        return averaged, None
    spreads = [mean_interval(paired)[1] for one in passes if (paired := paired_differences(one, averaged))]
    return averaged, max(spreads, default=None)


def _starts(numbers: Sequence[int]) -> str:
    return ("start " if len(numbers) == 1 else "starts ") + ", ".join(map(str, numbers))


def judge_over_starts(starts: Sequence[Mapping[str, Any] | None],
                      aa_starts: Sequence[Mapping[str, Any] | None] = (),
                      baseline_starts: Sequence[Mapping[str, Any] | None] = ()) -> StartsJudgement:
    """The judgement of a recipe's answers over every start's pass (the module's rule).

    + starts: the recipe's bench results, one per engine start, in the order measured
    + aa_starts: the reference recipe's results in this tournament's starts (its A/A), () when the starting
      recipe is not the reference recipe
    + baseline_starts: the starting recipe's results in this tournament's starts: against an imported reference
      each start is judged relative to them (() judges against the reference alone)
    """
    against = next((against_of(result) for result in starts if against_of(result).get("reference")), {})
    baseline = start_baseline(baseline_starts) if against and is_imported(against) else None
    if baseline is not None:
        floor = baseline[1]
        judged = [relative_state(result, baseline[0], floor) for result in starts]
    else:
        floor = noise_floor(starts, aa_starts)
        judged = [start_state(result, floor) for result in starts]
    tolerance = against.get("tolerance")
    common = dict(per_start=tuple(mean for _, mean, _ in judged), noise_kld=floor,
                  tolerance=None if tolerance is None else float(tolerance), reference=reference_words(against))
    if all(state == OFF for state, _, _ in judged):
        return StartsJudgement(OFF, "no quality pass", **common)
    counted = [(number, state, mean, why) for number, (state, mean, why) in enumerate(judged, start=1)
               if state != RECORDED]
    recorded = [number for number, (state, _, _) in enumerate(judged, start=1) if state == RECORDED]
    left_out = f"; {_starts(recorded)} recorded the reference" if recorded else ""
    if not counted:
        return StartsJudgement(UNKNOWN, "quality: this run recorded the reference (nothing to compare yet)", **common)
    label = "mean KLD" if baseline is None else "mean KLD beyond the start recipe's"
    means = ", ".join("—" if mean is None else f"{mean:+.4f}" if baseline else f"{mean:.4f}"
                      for _, _, mean, _ in counted)
    measured_noise = "A/A noise " + ("not measured yet" if floor is None else f"{floor:.4f}")
    if baseline is not None:
        measured_noise += " (the start recipe's spread over its starts)"
    noise = f"the {measured_noise}"
    within = f"the tolerance {float(tolerance):g}" if tolerance is not None else "the tolerance"
    states = {state for _, state, _, _ in counted}
    total = len(counted)
    every = "its one start" if total == 1 else f"all {total} starts"
    if states == {DIFFER}:
        first = next((against_of(result).get("first_divergence") for result in starts
                      if against_of(result).get("first_divergence")), None)
        if any(why.startswith("answers differ (task score") for _, _, _, why in counted):  # not the KLD: say why
            line = f"answers differ in {every} ({'; '.join(f'start {n}: {why}' for n, _, _, why in counted)}{left_out})"
        else:
            line = f"answers differ in {every} ({label} {means}; each interval past {within} and {noise}{left_out})"
        return StartsJudgement(DIFFER, line + (f"; first: {first}" if first else ""), **common)
    if states == {SAME_ANSWERS}:
        return StartsJudgement(SAME_ANSWERS, f"answers same in {every} ({label} {means}; each interval within "
                                             f"{within} as the top-k KLD reads it; {measured_noise}{left_out})",
                               **common)
    said = []
    for state in (DIFFER, SAME_ANSWERS):
        numbers = [number for number, seen, _, _ in counted if seen == state]
        if numbers:
            said.append(f"answers {'differ' if state == DIFFER else 'same'} in {_starts(numbers)} of {total}")
    said += [f"start {number}: {why}" for number, state, _, why in counted
             if state not in (DIFFER, SAME_ANSWERS)]
    return StartsJudgement(UNKNOWN, f"quality cannot tell ({'; '.join(said)}; {label} per start {means}; a claim "
                                    f"needs every start's interval past {within} and {noise}, or every start's "
                                    "within it"
                                    f"{left_out})", **common)
