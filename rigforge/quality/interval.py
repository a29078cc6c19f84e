"""The 95 % interval of a mean KLD, by a bootstrap over texts and the positions within them.

Per-position KLD is heavy-tailed (one position where the candidate moved a likely token carries more than a
hundred quiet ones: in the sandbox's kv-q4 pass 5 of 64 positions carry a third of the sum) and positions of one
text share their context, so neither a normal interval over positions nor one over a handful of texts is honest.
The bootstrap draws texts with replacement, then positions with replacement within each drawn text, and takes
the 2.5th and 97.5th percentiles of the pooled mean over ``RESAMPLES`` draws. The draws are seeded, so the same
pass always gives the same interval (a judgement read twice says the same).

The same resampling gives the interval of a **paired** difference: two passes scored at the same positions
(both kept on the reference's path), position by position, as a candidate against the start recipe when the
reference was imported (rigforge/quality/over_starts.py).

Example::

    low, high = mean_interval({"eccl-1": [0.0, 0.002, 0.1], "prov-6": [0.001, 0.0]})
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

#: Bootstrap draws (the interval's ends move by well under 1 % of its width between seeds at this many).
RESAMPLES = 1000
#: The seed: a fixed one, so a judgement is reproducible.
SEED = 48


def mean_interval(per_text: Mapping[str, Sequence[float]], confidence: float = 0.95) -> tuple[float, float]:
    """The bootstrap interval of the pooled mean of ``per_text``'s values (texts, then positions, resampled).

    + per_text: each text's per-position values (texts without values are left out)
    + confidence: the interval's coverage (0.95: the 2.5th to the 97.5th percentile of the draws)

    >>> mean_interval({"a": [0.01, 0.01], "b": [0.01]})
    (0.01, 0.01)
    >>> low, high = mean_interval({"a": [0.0, 0.0, 0.3], "b": [0.0, 0.01, 0.02]})
    >>> 0.0 <= low < 0.055 < high <= 0.3
    True
    """
    texts = [list(values) for values in per_text.values() if values]
    if not texts:
        raise ValueError("no values to take an interval of")
    generator = random.Random(SEED)
    means = []
    for _ in range(RESAMPLES):
        total, count = 0.0, 0
        for text in generator.choices(texts, k=len(texts)):
            total += sum(generator.choices(text, k=len(text)))
            count += len(text)
        means.append(total / count)
    means.sort()
    tail = (1.0 - confidence) / 2.0
    low = means[int(tail * (RESAMPLES - 1))]
    high = means[int(round((1.0 - tail) * (RESAMPLES - 1)))]
    return round(low, 6), round(high, 6)


def paired_differences(candidate: Mapping[str, Sequence[float | None]],
                       baseline: Mapping[str, Sequence[float | None]]) -> dict[str, list[float]]:
    """Per text, ``candidate - baseline`` at each position both scored (the same index of the same text).

    >>> paired_differences({"a": [0.02, None, 0.03]}, {"a": [0.01, 0.5, 0.01], "b": [0.1]})
    {'a': [0.01, 0.02]}
    """
    paired: dict[str, list[float]] = {}
    for text, values in candidate.items():
        theirs = baseline.get(text) or []
        pairs = [round(ours - base, 9) for ours, base in zip(values, theirs, strict=False)
                 if ours is not None and base is not None]
        if pairs:
            paired[text] = pairs
    return paired


def average_positions(passes: Sequence[Mapping[str, Sequence[float | None]]]) -> dict[str, list[float | None]]:
    """Position by position, the mean over ``passes`` of the values they all scored (None where one did not).

    >>> average_positions([{"a": [0.0, 0.2]}, {"a": [0.02, None]}])
    {'a': [0.01, None]}
    """
    texts = set().union(*(set(one) for one in passes)) if passes else set()
    averaged: dict[str, list[float | None]] = {}
    for text in sorted(texts):
        columns = [one.get(text) or [] for one in passes]
        length = min(len(column) for column in columns)
        averaged[text] = [None if any(column[index] is None for column in columns)
                          else round(sum(column[index] for column in columns) / len(columns), 9)  # type: ignore
                          for index in range(length)]
    return averaged
