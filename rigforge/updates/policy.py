"""What a comparison judges and how strictly: the profile's tolerances, its primary metric, and the chance of a
false claim it allows (``bench.regression_tolerance``, ``bench.primary``, ``bench.verdicts``).

Example::

    policy = RegressionPolicy.from_profile(load_profile("sandbox"))
    policy.tolerance("decode_tps_per_user", 1, 128), policy.primary      # (5.0, Primary('decode_tps_per_user', 1, 128))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rigforge.bench.config import COMPLETIONS, CellKind

#: The chance of a false better/worse claim in one comparison when a profile names none (bench.verdicts).
FALSE_CLAIM_RATE = 0.05


@dataclass(frozen=True)
class Tolerance:
    """How much worse (in %) a metric may get; None concurrency/input_tokens: every cell."""

    metric: str
    max_worse_percent: float
    concurrency: int | None = None
    input_tokens: int | None = None

    def specificity(self, concurrency: int, input_tokens: int) -> int:
        """-1 if the rule does not apply to the cell, else how many of its cell fields matched."""
        score = 0
        for wanted, actual in ((self.concurrency, concurrency), (self.input_tokens, input_tokens)):
            if wanted is not None:
                if wanted != actual:
                    return -1
                score += 1
        return score


@dataclass(frozen=True)
class Primary:
    """The one (metric, cell) that alone can make a comparison ``better`` (the profile's ``bench.primary``)."""

    metric: str
    concurrency: int
    input_tokens: int

    def names(self, key: tuple[CellKind, int, int], metric: str) -> bool:
        return (metric, key) == (self.metric, (COMPLETIONS, self.concurrency, self.input_tokens))


@dataclass(frozen=True)
class RegressionPolicy:
    """The tolerance rules (for a (cell, metric) the most specific matching rule applies), the primary metric
    and the chance of a false claim allowed in one comparison."""

    tolerances: tuple[Tolerance, ...] = ()
    primary: Primary | None = None
    false_claim_rate: float = FALSE_CLAIM_RATE

    @classmethod
    def from_profile(cls, profile: Any) -> RegressionPolicy:
        """The policy of a Profile's ``bench`` (``regression_tolerance``, ``primary``, ``verdicts``)."""
        rules = getattr(profile.bench, "regression_tolerance", None) or []
        primary = getattr(profile.bench, "primary", None)
        verdicts = getattr(profile.bench, "verdicts", None)
        return cls(tuple(_as_tolerance(rule) for rule in rules),
                   Primary(primary.metric, primary.concurrency, primary.input_tokens) if primary else None,
                   verdicts.false_claim_rate if verdicts else FALSE_CLAIM_RATE)

    def tolerance(self, metric: str, concurrency: int, input_tokens: int) -> float | None:
        """Allowed worsening in %, None if no rule judges this metric in this cell."""
        best: tuple[int, float] | None = None
        for rule in self.tolerances:
            score = rule.specificity(concurrency, input_tokens) if rule.metric == metric else -1
            if score >= 0 and (best is None or score > best[0]):
                best = (score, rule.max_worse_percent)
        return None if best is None else best[1]


def _as_tolerance(rule: Any) -> Tolerance:
    def read(name: str) -> Any:
        return rule.get(name) if isinstance(rule, Mapping) else getattr(rule, name, None)

    return Tolerance(read("metric"), float(read("max_worse_percent")), read("concurrency"), read("input_tokens"))
