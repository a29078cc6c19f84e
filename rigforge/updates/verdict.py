"""The verdicts a recipe tournament and a driver update give: ``better``, ``worse (regression)``, ``same``,
``cannot tell`` — each a claim that has to survive an A/A test (two sides of the same thing), also when every
engine start runs at its own speed.

The unit of replication is the **engine start**: a question holds one value per start a side (the geometric
mean of the repeats inside it, rigforge.updates.starts), so the spread that decides is the start-to-start spread.
Repeats inside one start share that start's luck and only make its own value steadier.

One question per (cell, metric) the profile judges (a ``bench.regression_tolerance`` rule names it). A question
is refused (``cannot tell``, with the reason) when a value is not a finite number, is zero or less, a side has
fewer than two starts (the start-to-start noise is then unmeasured, however steady the repeats), or a side's
starts are identical (no spread measured: copied or rounded numbers, not a noise of zero). Otherwise a change is
claimed only when its whole confidence interval lies past the tolerance: Welch's t on the logs of the start values
tests "the change lies within the tolerance" (rigforge.updates.significance.Welch.p_beyond). The profile's primary
metric (``bench.primary``) alone spends half the chance of a false claim, ``bench.verdicts.false_claim_rate``;
every other judged metric shares the other half by Holm. The interval shown is the primary's level (97.5 % at
the default 5 %). The interval is the noise: its width comes from the measured start-to-start spread, so a claim
that clears it is past the noise too. criterion.rs likewise calls a change only when its interval clears a
threshold, there a fixed noise threshold (1 % by default), here the profile's tolerance. No further gate of a
few start spreads: it would make a change smaller than that unfindable at any number of starts, where the
documents' answer to a ±15 % scatter is more restarts. The row still shows the noise (twice the standard
deviation of one start's value: where one more start may land).

Only the primary can make a comparison ``better``; any other judged metric can only veto it (``worse``).
``same`` is an equivalence test (TOST: two one-sided tests at 5 % each, i.e. the 90 % interval of the change
inside ± the tolerance; D. J. Schuirmann, J. Pharmacokinet. Biopharm. 15, 1987 — the 90 % interval the FDA's
bioequivalence guidance uses); otherwise, without a claim, it is ``cannot tell`` — with the noise and how many
engine starts a side would decide it with 80 % power (``starts_to_decide``).

Example::

    answers = judge([Question(before=(30.1, 30.4, 29.8), after=(18.2, 18.9, 18.4), higher_is_better=True,
                              tolerance_percent=5, primary=True)], false_claim_rate=0.05)
    answers[0].verdict                                   # 'worse (regression)'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rigforge.updates.significance import Welch, holm, t_quantile, welch_log

__all__ = ["BETTER", "CANNOT_TELL", "EQUIVALENCE_INTERVAL", "POWER", "SAME", "VERDICTS", "WORSE", "Answer",
           "Question", "judge", "overall", "starts_to_decide"]

BETTER, WORSE, SAME, CANNOT_TELL = "better", "worse (regression)", "same", "cannot tell"
VERDICTS = (BETTER, WORSE, SAME, CANNOT_TELL)
#: ``same``: the change's 90 % interval inside ± the tolerance (TOST at 5 % a side, Schuirmann 1987).
EQUIVALENCE_INTERVAL = 0.90
#: The chance of a verdict that ``starts_to_decide`` sizes the starts for.
POWER = 0.80
#: More starts than this a side are not proposed: the noise, not the count, is then what to fix.
MOST_STARTS = 30
#: The noise shown: this many standard deviations of one start's value (where one more start may land).
NOISE_SPREADS = 2.0


@dataclass(frozen=True)
class Question:
    """One (cell, metric) to judge.

    + before / after: one value per engine start (the geometric mean of that start's repeats)
    + higher_is_better: tok/s yes, milliseconds no
    + tolerance_percent: the profile's tolerance for it
    + primary: the profile's primary metric and cell
    """

    before: tuple[float, ...]
    after: tuple[float, ...]
    higher_is_better: bool
    tolerance_percent: float
    primary: bool = False


@dataclass(frozen=True)
class Answer:
    """The verdict on one question and the numbers behind it."""

    verdict: str
    change_percent: float | None  # after vs before, ratio of geometric means, signed
    p_value: float | None  # of "the change lies within the tolerance" (the test that decides a claim)
    noise_percent: float | None  # twice the spread of one start's value: where one more start may land
    interval_percent: tuple[float, float] | None  # the change's interval at interval_level
    starts_to_decide: int | None  # engine starts a side that would likely decide a "cannot tell"; None: none would
    why: str
    interval_level: float | None = None  # 0.975: the two-sided 97.5 % interval

    @property
    def repeats_to_decide(self) -> int | None:
        """The older name of ``starts_to_decide``."""
        return self.starts_to_decide


def starts_to_decide(change_percent: float, start_spread_percent: float, tolerance_percent: float,
                     claim_rate: float, power: float = POWER) -> int | None:
    """Engine starts a side that give a verdict with chance ``power`` if the true change and the start-to-start
    spread are the ones given; None when no count up to MOST_STARTS would.

    Past the tolerance the goal is a claim: the ``1 - claim_rate`` interval past the tolerance; inside it, ``same``:
    the 90 % interval inside ± the tolerance. The normal-theory sample size with t quantiles at 2n - 2 degrees of
    freedom (at a change of exactly zero, ``same`` needs both one-sided tests to pass: the power's quantile is
    taken at half its miss rate; S.-C. Chow, J. Shao, H. Wang, Sample Size Calculations in Clinical Research, 3.2).

    + change_percent: the change to size for (e.g. the one measured), signed
    + start_spread_percent: standard deviation of one start's value, in % (e.g. 2.3)
    + tolerance_percent: the profile's tolerance for the metric
    + claim_rate: the false-claim rate the claim is tested at (the primary's share: 0.025 by default)
    + power: the chance of a verdict the count is sized for

    >>> starts_to_decide(20.0, 2.3, 5.0, 0.025), starts_to_decide(0.0, 2.0, 5.0, 0.025)
    (3, 4)
    >>> starts_to_decide(6.0, 4.0, 5.0, 0.025) is None      # 1 % past the tolerance at 4 % spread: > 30 starts
    True
    """
    change, sd = math.log1p(change_percent / 100.0), math.log1p(start_spread_percent / 100.0)
    up, down = math.log1p(tolerance_percent / 100.0), _down_margin(tolerance_percent)
    margin = up if change >= 0 else down
    if abs(change) > margin:
        room, level, miss = abs(change) - margin, claim_rate, 1.0 - power
    else:
        room, level = min(up - change, down + change), 1.0 - EQUIVALENCE_INTERVAL
        miss = (1.0 - power) / 2.0 if change == 0.0 else 1.0 - power
    if sd == 0.0:
        return 2
    for starts in range(2, MOST_STARTS + 1):
        df = 2 * starts - 2
        if (t_quantile(level, df) + t_quantile(2.0 * miss, df)) * sd * math.sqrt(2.0 / starts) <= room:
            return starts
    return None


def _down_margin(tolerance_percent: float) -> float:
    """The tolerance of a drop in log units (a drop of 100 % or more cannot happen: infinite)."""
    return -math.log1p(-tolerance_percent / 100.0) if tolerance_percent < 100.0 else math.inf


def refusal(question: Question) -> str | None:
    """Why the question cannot be tested at all, None if it can."""
    values = (*question.before, *question.after)
    if not all(math.isfinite(value) for value in values):
        return "a value that is not a number (NaN or infinite) on a side: not judged"
    if min(values, default=0.0) <= 0.0:
        return "a value of zero or less on a side: no ratio to judge"
    counts = (len(question.before), len(question.after))
    if min(counts) < 2:
        where = "a side" if counts == (1, 1) else ("before" if counts[0] < 2 else "after")
        return (f"one engine start {where} ({counts[0]} before, {counts[1]} after): the start-to-start noise is "
                "unmeasured; at least 2 starts a side measure it")
    for side, name in ((question.before, "before"), (question.after, "after")):
        if max(side) == min(side):
            return f"the {name} side's {len(side)} starts are identical: no start-to-start spread was measured"
    return None


def _margin(test: Welch, tolerance_percent: float) -> float:
    return math.log1p(tolerance_percent / 100.0) if test.log_change >= 0 else _down_margin(tolerance_percent)


def _interval(interval: tuple[float, float], level: float) -> str:
    return f"{level * 100:g} % interval {interval[0]:+.1f} … {interval[1]:+.1f} %"


def _answer(question: Question, test: Welch | None, p_beyond: float | None, significant: bool,
            share: float) -> Answer:
    refused = refusal(question)
    if test is None or p_beyond is None or refused:
        return Answer(CANNOT_TELL, None if test is None else test.change_percent, None, None, None, None,
                      refused or "no test")
    sign = -1.0 if question.higher_is_better else 1.0
    worse, tolerance = sign * test.change_percent, question.tolerance_percent
    noise = math.expm1(NOISE_SPREADS * test.sd) * 100.0
    claimed = test.interval_percent(share)
    low, high = sorted(sign * bound for bound in claimed)
    starts = f"{test.repeats[0]} vs {test.repeats[1]} starts"
    if significant and (low > tolerance or high < -tolerance):
        why = f"{_interval(claimed, 1 - share)} past tolerance {tolerance:g} % (p = {p_beyond:.2g}, {starts})"
        return Answer(WORSE if worse > 0 else BETTER, test.change_percent, p_beyond, noise, claimed, None, why,
                      1 - share)
    equivalence = test.interval_percent(1.0 - EQUIVALENCE_INTERVAL)
    if -tolerance < equivalence[0] and equivalence[1] < tolerance:
        return Answer(SAME, test.change_percent, p_beyond, noise, equivalence, None,
                      f"within ±{tolerance:g} % ({_interval(equivalence, EQUIVALENCE_INTERVAL)}, {starts})",
                      EQUIVALENCE_INTERVAL)
    past = abs(worse) > tolerance
    shown, level = (claimed, 1 - share) if past else (equivalence, EQUIVALENCE_INTERVAL)
    needed = starts_to_decide(test.change_percent, math.expm1(test.sd) * 100.0, tolerance, share)
    if needed is not None:
        needed = max(needed, max(test.repeats) + 1)
    if past and (low > tolerance or high < -tolerance):
        why = f"{_interval(claimed, level)} clears tolerance {tolerance:g} % alone, not after Holm (p = {p_beyond:.2g})"
    elif past:
        why = f"{_interval(claimed, level)} reaches inside tolerance {tolerance:g} %"
    else:
        why = f"{_interval(equivalence, level)} reaches past ±{tolerance:g} %"
    if needed:
        more = f"; about {needed} engine starts a side would decide ({POWER * 100:g} % power, noise ±{noise:.1f} %)"
    else:
        more = f"; more than {MOST_STARTS} engine starts a side would be needed at noise ±{noise:.1f} %"
    return Answer(CANNOT_TELL, test.change_percent, p_beyond, noise, shown, needed, f"{why} ({starts}){more}", level)


def judge(questions: Sequence[Question], false_claim_rate: float) -> list[Answer]:
    """Answer every question of one comparison.

    + questions: every judged (cell, metric), at most one of them primary
    + false_claim_rate: the chance of any false better/worse claim in this comparison (bench.verdicts)
    """
    tests = [None if refusal(question) else welch_log(question.before, question.after) for question in questions]
    p_beyond = [None if test is None else test.p_beyond(_margin(test, question.tolerance_percent))
                for question, test in zip(questions, tests, strict=True)]
    primary = [index for index, question in enumerate(questions) if question.primary]
    others = [index for index, question in enumerate(questions) if not question.primary]
    share = false_claim_rate / 2.0 if primary and others else false_claim_rate
    significant = [False] * len(questions)
    for group in (primary, others):
        testable = [index for index in group if p_beyond[index] is not None]  # Holm sees finite p-values only
        for index, passed in zip(testable, holm([p_beyond[index] or 0.0 for index in testable], share), strict=True):
            significant[index] = passed
    return [_answer(question, test, p, passed, share)
            for question, test, p, passed in zip(questions, tests, p_beyond, significant, strict=True)]


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
