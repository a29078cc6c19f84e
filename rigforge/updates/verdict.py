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
``same`` is an equivalence test on **every** judged metric (TOST: two one-sided tests at 5 % each, i.e. the 90 %
interval of the change inside ± that metric's tolerance; D. J. Schuirmann, J. Pharmacokinet. Biopharm. 15, 1987 —
the 90 % interval the FDA's bioequivalence guidance uses, endpoint by endpoint): an intersection-union test, so it
needs no correction for their number. A judged metric that is not same — moved past its tolerance, too noisy to
tell, or unjudgeable (a NaN, a value of zero or less, one start: ``Answer.refused``) — leaves the comparison
``cannot tell``; an unjudgeable one blocks ``better`` too (it might have been a veto). A ``cannot tell`` says the
resolution: what these starts resolve at the spread they measured (rigforge.updates.resolution: the smallest loss
called worse and the narrowest "same" margin, 80 % power) and how many engine starts a side would resolve the
tolerance (``starts_to_decide``: sized at the tolerance, a loss of twice it called worse and no change same, not
at the change measured).

One bad start a side is set aside by a rule declared in rigforge.updates.robust (a start 18-22 % off its side's
median start across the judged rows, and four times further than the side's other starts): the questions are
judged without it, and a better or worse claim stands only when all the starts claim it too, so the rule never
makes a claim; the answer says which start was set aside.

Example::

    answers = judge([Question(before=(30.1, 30.4, 29.8), after=(18.2, 18.9, 18.4), higher_is_better=True,
                              tolerance_percent=5, primary=True)], false_claim_rate=0.05)
    answers[0].verdict                                   # 'worse (regression)'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rigforge.updates.resolution import Resolution, resolution, starts_to_decide, starts_to_resolve
from rigforge.updates.robust import set_aside, shifts
from rigforge.updates.significance import Welch, holm, welch_log

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
    spread: float | None = None  # the start-to-start sd of one start's log value (Welch.sd); None: unmeasured
    refused: bool = False  # not testable at all (a NaN, a value <= 0, one start a side): the comparison cannot tell
    resolution: Resolution | None = None  # what these starts resolve at the spread measured (None: untested)
    set_aside: str = ""  # the start the one-bad-start rule set aside (rigforge.updates.robust), said

    @property
    def repeats_to_decide(self) -> int | None:
        """The older name of ``starts_to_decide``."""
        return self.starts_to_decide


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
                      refused or "no test", refused=True)
    sign = -1.0 if question.higher_is_better else 1.0
    worse, tolerance = sign * test.change_percent, question.tolerance_percent
    noise = math.expm1(NOISE_SPREADS * test.sd) * 100.0
    claimed = test.interval_percent(share)
    low, high = sorted(sign * bound for bound in claimed)
    starts = f"{test.repeats[0]} vs {test.repeats[1]} starts"
    seen = resolution(*test.repeats, test.sd, tolerance / 100.0, share, POWER)
    if significant and (low > tolerance or high < -tolerance):
        why = f"{_interval(claimed, 1 - share)} past tolerance {tolerance:g} % (p = {p_beyond:.2g}, {starts})"
        return Answer(WORSE if worse > 0 else BETTER, test.change_percent, p_beyond, noise, claimed, None, why,
                      1 - share, test.sd, resolution=seen)
    equivalence = test.interval_percent(1.0 - EQUIVALENCE_INTERVAL)
    if -tolerance < equivalence[0] and equivalence[1] < tolerance:
        return Answer(SAME, test.change_percent, p_beyond, noise, equivalence, None,
                      f"within ±{tolerance:g} % ({_interval(equivalence, EQUIVALENCE_INTERVAL)}, {starts})",
                      EQUIVALENCE_INTERVAL, test.sd, resolution=seen)
    past = abs(worse) > tolerance
    shown, level = (claimed, 1 - share) if past else (equivalence, EQUIVALENCE_INTERVAL)
    needed = starts_to_resolve(test.sd, tolerance / 100.0, share, POWER, MOST_STARTS, same=True)
    if needed is not None:
        needed = max(needed, max(test.repeats) + 1)
    if past and (low > tolerance or high < -tolerance):
        why = f"{_interval(claimed, level)} clears tolerance {tolerance:g} % alone, not after Holm (p = {p_beyond:.2g})"
    elif past:
        why = f"{_interval(claimed, level)} reaches inside tolerance {tolerance:g} %"
    else:
        why = f"{_interval(equivalence, level)} reaches past ±{tolerance:g} %"
    if needed:
        more = (f"; about {needed} engine starts a side would resolve ±{tolerance:g} % at this spread (a loss of "
                f"{2 * tolerance:g} % called worse, no change same; {POWER * 100:g} % power, noise ±{noise:.1f} %)")
    else:
        more = (f"; more than {MOST_STARTS} engine starts a side would be needed to resolve ±{tolerance:g} % at "
                f"noise ±{noise:.1f} %")
    return Answer(CANNOT_TELL, test.change_percent, p_beyond, noise, shown, needed,
                  f"{why} ({starts}); resolution: {seen.describe()}{more}", level, test.sd, resolution=seen)


def _judge(questions: Sequence[Question], false_claim_rate: float) -> list[Answer]:
    """Every question answered on all its values: the primary alone at its share, the others by Holm."""
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


def _without(values: tuple[float, ...], start: int | None) -> tuple[float, ...]:
    return values if start is None else values[:start] + values[start + 1:]


def _set_aside_words(questions: Sequence[Question], before: int | None, after: int | None) -> str:
    """``after-start 3 set aside (-40.1 % from its side's median start over the judged rows)``."""
    directions = [question.higher_is_better for question in questions]
    said = []
    for name, start, side in (("before", before, [q.before for q in questions]),
                              ("after", after, [q.after for q in questions])):
        if start is not None:
            shift = (shifts(side, directions) or [0.0] * (start + 1))[start]
            said.append(f"{name}-start {start + 1} of {len(side[0])} set aside ({math.expm1(shift) * 100:+.1f} % "
                        "from its side's median start over the judged rows: one bad start)")
    return ", ".join(said)


def _robust(full: Answer, kept: Answer, said: str) -> Answer:
    """The answer without the set-aside start; a claim only when all the starts claim it too."""
    if kept.verdict in (BETTER, WORSE) and full.verdict != kept.verdict:
        return replace(kept, verdict=CANNOT_TELL, set_aside=said,
                       why=f"{kept.why}; {said}, and with it no {kept.verdict} ({full.verdict}): no claim rests on "
                           "a start set aside")
    return replace(kept, set_aside=said, why=f"{kept.why}; {said}")


def judge(questions: Sequence[Question], false_claim_rate: float, aligned: bool = True) -> list[Answer]:
    """Answer every question of one comparison, one bad start a side set aside by the declared rule
    (rigforge.updates.robust): judged without it, a claim standing only when all the starts claim it too.

    + questions: every judged (cell, metric), at most one of them primary
    + false_claim_rate: the chance of any false better/worse claim in this comparison (bench.verdicts)
    + aligned: every question's values are the same starts in the same order (the rule needs that)
    """
    answers = _judge(questions, false_claim_rate)
    if not aligned or not questions:
        return answers
    before, after = set_aside([q.before for q in questions], [q.after for q in questions],
                              [q.higher_is_better for q in questions])
    if before is None and after is None:
        return answers
    kept = _judge([replace(q, before=_without(q.before, before), after=_without(q.after, after)) for q in questions],
                  false_claim_rate)
    said = _set_aside_words(questions, before, after)
    return [_robust(full, answer, said) for full, answer in zip(answers, kept, strict=True)]


def overall(answers: Sequence[Answer], primary: int | None) -> tuple[str, int | None]:
    """The comparison's verdict and the index of the answer that decided it:

    - ``worse``: any answer is (the largest change decides: a veto);
    - ``cannot tell``: any judged answer is unjudgeable (a NaN, a value <= 0, one start: ``refused``), so neither
      better nor same can hold for it;
    - ``better``: the primary is (only the primary can make better; another judged metric can only veto);
    - ``same``: every judged answer is same (TOST inside each one's own tolerance: an intersection-union test, so
      no correction for their number, D. J. Schuirmann 1987; R. L. Berger, J. C. Hsu, Stat. Sci. 11, 1996);
    - ``cannot tell`` otherwise: the primary's answer when it is not same, else the first answer that is not.

    + answers: judge()'s answers
    + primary: the index of the primary question, None without one

    >>> same = Answer(SAME, 1.0, 0.5, 3.0, (-2.0, 4.0), None, "")
    >>> overall([same, Answer(BETTER, 20.0, 0.001, 3.0, (10.0, 30.0), None, "")], None)
    ('cannot tell', 1)
    >>> overall([same, Answer(CANNOT_TELL, -15.0, 0.3, 9.0, (-30.0, 1.0), 9, "")], 0)
    ('cannot tell', 1)
    """
    worse = [index for index, answer in enumerate(answers) if answer.verdict == WORSE]
    if worse:
        return WORSE, max(worse, key=lambda index: abs(answers[index].change_percent or 0.0))
    refused = [index for index, answer in enumerate(answers) if answer.refused]
    if refused:
        return CANNOT_TELL, primary if primary in refused else refused[0]
    if primary is not None and answers[primary].verdict != SAME:
        return (BETTER if answers[primary].verdict == BETTER else CANNOT_TELL), primary
    undecided = [index for index, answer in enumerate(answers) if answer.verdict != SAME]
    if undecided:
        return CANNOT_TELL, undecided[0]
    return SAME, (primary if primary is not None else 0 if answers else None)
