"""The verdicts a recipe tournament and a driver update give: ``better``, ``worse (regression)``, ``same``,
``cannot tell`` — each a claim that has to survive an A/A test (two runs of the same thing).

One question per (cell, metric) the profile judges (a ``bench.regression_tolerance`` rule names it). A change
is claimed only when all three hold:

1. it is significant across the repeats (Welch's t on log values, rigforge.updates.significance): the profile's
   primary metric (``bench.primary``, declared before anything is measured) alone spends half the chance of a
   false claim, ``bench.verdicts.false_claim_rate``; every other judged metric shares the other half by Holm;
2. it is larger than the profile's tolerance for that metric and cell (a change the owner cares about);
3. it is larger than the measured noise: twice the spread of one repeat (standard deviation of the logs), and
   the drift of the start (the same recipe measured again later) when it was measured; a start that drifted
   more than the tolerance allows no claim at all on that metric (the machine changed during the run).

Only the primary can make a comparison ``better``; any other judged metric can only veto it (``worse``).
``same`` means the primary's confidence interval lies inside ± its tolerance (an equivalence test) and the
start's drift is inside it too; otherwise, without a claim, it is ``cannot tell`` — with the noise and about how
many repeats a side would decide it.

Example::

    answers = judge([Question(before=(30.1, 30.4), after=(18.2, 18.9), higher_is_better=True,
                              tolerance_percent=5, primary=True)], false_claim_rate=0.05)
    answers[0].verdict                                   # 'worse (regression)'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rigforge.updates.significance import Welch, holm, t_quantile, welch_log

__all__ = ["BETTER", "CANNOT_TELL", "SAME", "VERDICTS", "WORSE", "Answer", "Question", "judge", "overall"]

BETTER, WORSE, SAME, CANNOT_TELL = "better", "worse (regression)", "same", "cannot tell"
VERDICTS = (BETTER, WORSE, SAME, CANNOT_TELL)
#: More repeats than this a side are not proposed: the noise, not the count, is then what to fix.
MOST_REPEATS = 30
#: How many standard deviations of one repeat a change must exceed (criterion.rs's noise threshold, measured).
NOISE_SPREADS = 2.0


@dataclass(frozen=True)
class Question:
    """One (cell, metric) to judge.

    + before / after: the per-repeat values (before: the start's runs pooled)
    + higher_is_better: tok/s yes, milliseconds no
    + tolerance_percent: the profile's tolerance for it
    + primary: the profile's primary metric and cell
    + drift_percent: how far the start moved between its runs (signed, after vs first), None if measured once
    """

    before: tuple[float, ...]
    after: tuple[float, ...]
    higher_is_better: bool
    tolerance_percent: float
    primary: bool = False
    drift_percent: float | None = None


@dataclass(frozen=True)
class Answer:
    """The verdict on one question and the numbers behind it."""

    verdict: str
    change_percent: float | None  # after vs before, ratio of geometric means, signed
    p_value: float | None
    noise_percent: float | None  # the noise a claim must exceed
    interval_percent: tuple[float, float] | None  # the change's confidence interval at the level used
    repeats_to_decide: int | None  # repeats a side that would likely decide a "cannot tell"; None: none would
    why: str


def noise_percent(test: Welch, drift_percent: float | None) -> float:
    """The noise a claim must exceed: NOISE_SPREADS spreads of one repeat, or the start's drift if larger."""
    spread = math.expm1(NOISE_SPREADS * test.sd) * 100.0
    return max(spread, abs(drift_percent or 0.0))


def repeats_to_decide(test: Welch, tolerance_percent: float, noise: float, level: float) -> int | None:
    """About how many repeats a side would give a verdict at today's spread (None: no count would)."""
    change, tolerance = abs(test.log_change), math.log1p(tolerance_percent / 100.0)
    if change > tolerance and abs(test.change_percent) <= noise:
        return None  # a change inside the noise: more repeats do not make the noise smaller
    margin = tolerance - change if change < tolerance else change
    if test.sd == 0.0:
        return max(test.repeats)
    for repeats in range(2, MOST_REPEATS + 1):
        if t_quantile(level, 2 * repeats - 2) * test.sd * math.sqrt(2.0 / repeats) < margin:
            return max(repeats, max(test.repeats) + 1)
    return None


def _answer(question: Question, test: Welch | None, significant: bool, level: float) -> Answer:
    if test is None:
        return Answer(CANNOT_TELL, None, None, None, None, 2, "fewer than two repeats on a side: no spread")
    sign = -1.0 if question.higher_is_better else 1.0
    worse = sign * test.change_percent
    tolerance = question.tolerance_percent
    noise = noise_percent(test, question.drift_percent)
    interval = test.interval_percent(level)
    low, high = sorted(sign * bound for bound in interval)
    numbers = (test.change_percent, test.p_value, noise, interval)
    # A start that moved more than the tolerance between its own runs says the machine changed during the run
    # by more than the owner cares about: a recipe measured in between may have met any of those conditions, or
    # others, so no claim either way (a real run: the start went 3.4 -> 21.2 tok/s as a neighbour's load ended,
    # and a slower recipe measured after it read +834 %).
    drifted = abs(question.drift_percent or 0.0) > tolerance
    if significant and abs(worse) > tolerance and abs(worse) > noise and not drifted:
        why = f"p = {test.p_value:.2g}, beyond tolerance {tolerance:g} % and noise ±{noise:.1f} %"
        return Answer(WORSE if worse > 0 else BETTER, *numbers, None, why)
    if -tolerance < low and high < tolerance and not drifted:
        return Answer(SAME, *numbers, None,
                      f"within ±{tolerance:g} % (interval {interval[0]:+.1f} … {interval[1]:+.1f} %)")
    needed = None if drifted else repeats_to_decide(test, tolerance, noise, level)
    if drifted:
        why = (f"the start itself drifted {question.drift_percent:+.1f} %, beyond tolerance {tolerance:g} %: the "
               "machine changed during the run")
    elif not significant:
        why = f"not significant (p = {test.p_value:.2g}), noise ±{noise:.1f} %"
    else:
        why = f"significant but within tolerance {tolerance:g} % or noise ±{noise:.1f} %"
    if drifted:
        more = "; a steadier machine would decide, not more repeats"
    elif needed:
        more = f"; about {needed} repeats a side would decide"
    elif abs(worse) > tolerance:
        more = "; more repeats would not decide: the change is inside the noise"
    else:
        more = f"; more than {MOST_REPEATS} repeats a side would be needed at this noise"
    return Answer(CANNOT_TELL, *numbers, needed, why + more)


def judge(questions: Sequence[Question], false_claim_rate: float) -> list[Answer]:
    """Answer every question of one comparison.

    + questions: every judged (cell, metric), at most one of them primary
    + false_claim_rate: the chance of any false better/worse claim in this comparison (bench.verdicts)
    """
    tests = [welch_log(question.before, question.after) for question in questions]
    primary = [index for index, question in enumerate(questions) if question.primary]
    others = [index for index, question in enumerate(questions) if not question.primary]
    share = false_claim_rate / 2.0 if primary and others else false_claim_rate
    significant = [False] * len(questions)
    for group in (primary, others):
        testable = [index for index in group if tests[index] is not None]
        p_values = [tests[index].p_value for index in testable]  # type: ignore[union-attr]
        for index, passed in zip(testable, holm(p_values, share), strict=True):
            significant[index] = passed
    return [_answer(question, test, passed, share)
            for question, test, passed in zip(questions, tests, significant, strict=True)]


def overall(answers: Sequence[Answer], primary: int | None) -> tuple[str, int | None]:
    """The comparison's verdict and the index of the answer that decided it: the largest ``worse`` (a veto),
    else the primary's verdict (only the primary can make ``better``); without a primary, ``same`` when every
    answer is, else ``cannot tell``.

    + answers: judge()'s answers
    + primary: the index of the primary question, None without one

    >>> same = Answer(SAME, 1.0, 0.5, 3.0, (-2.0, 4.0), None, "")
    >>> overall([same, Answer(BETTER, 20.0, 0.001, 3.0, (10.0, 30.0), None, "")], None)
    ('cannot tell', 1)
    """
    worse = [index for index, answer in enumerate(answers) if answer.verdict == WORSE]
    if worse:
        return WORSE, max(worse, key=lambda index: abs(answers[index].change_percent or 0.0))
    if primary is not None:
        return answers[primary].verdict, primary
    undecided = [index for index, answer in enumerate(answers) if answer.verdict != SAME]
    if undecided:
        return CANNOT_TELL, undecided[0]
    return SAME, (0 if answers else None)
