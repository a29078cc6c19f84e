"""Promise: a verdict (pass, within noise, regression) is a claim the repeats back: worse than its tolerance is a
regression only when noise cannot explain it, and a cell lost after the change always is
(rigforge/updates/comparison.py). Results here are constructed, each repeat's numbers chosen to sit on a
boundary; the same comparison on real bench runs: tests/unit/test_compare.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from rigforge.updates.comparison import (
    METRICS,
    PASS,
    REGRESSION,
    WITHIN_NOISE,
    Cell,
    Comparison,
    RegressionPolicy,
    Tolerance,
    compare,
    judge_change,
    overall,
    repeats_overlap,
    spread_percent,
)

DECODE, OUTPUT, TTFT50, TTFT99, ITL50, ITL99 = METRICS
#: Decode may get 5 % worse anywhere, 2 % at C=1 in=128, 10 % for every prompt at C=8; TTFT p50 20 %.
POLICY = RegressionPolicy((Tolerance("decode_tps_per_user", 5.0), Tolerance("decode_tps_per_user", 2.0, 1, 128),
                           Tolerance("decode_tps_per_user", 10.0, 8, None), Tolerance("ttft_p50_ms", 20.0)))


def repeat(decode: float, ttft: float = 100.0) -> dict[str, Any]:
    """One repeat's metrics block as the bench writes it (the fields the comparison reads)."""
    return {"decode_tps_per_user": {"median": decode}, "output_throughput": decode * 2,
            "ttft_ms": {"median": ttft, "p99": ttft * 2}, "itl_ms": {"median": 10.0, "p99": 20.0}}


def cell(concurrency: int, input_tokens: int, decodes: list[float], ttfts: list[float] | None = None,
         status: str = "ok", **kind: Any) -> dict[str, Any]:
    blocks = [repeat(d, t) for d, t in zip(decodes, ttfts or [100.0] * len(decodes), strict=True)]
    return {"concurrency": concurrency, "input_tokens": input_tokens, "status": status, **kind,
            "repeats": blocks if len(blocks) > 1 else [], "metrics": blocks[0] if blocks else {}}


def result(*cells: dict[str, Any], driver: str = "590") -> dict[str, Any]:
    return {"metadata": {"driver_version": driver}, "cells": list(cells)}


def row(comparison: Comparison, metric: str, where: str = "C=1 in=128") -> Cell:
    return next(c for c in comparison.cells if c.metric.name == metric and c.where == where)


# --- which rule judges a cell ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("metric", "concurrency", "input_tokens", "tolerance"), [
    ("decode_tps_per_user", 1, 128, 2.0),  # the rule naming both fields beats the general one
    ("decode_tps_per_user", 1, 512, 5.0),  # the general rule where the specific one names another prompt
    ("decode_tps_per_user", 8, 512, 10.0),  # a rule naming concurrency alone
    ("ttft_p50_ms", 1, 128, 20.0),
    ("output_tps", 1, 128, None),  # no rule: shown, never judged
])
def test_the_most_specific_rule_judges_each_cell(metric: str, concurrency: int, input_tokens: int,
                                                 tolerance: float | None) -> None:
    assert POLICY.tolerance(metric, concurrency, input_tokens) == tolerance


def test_the_policy_is_read_from_a_profiles_rules_as_objects_or_mappings() -> None:
    class Bench:
        regression_tolerance = [{"metric": "decode_tps_per_user", "max_worse_percent": 3, "concurrency": 2},
                                Tolerance("ttft_p99_ms", 50.0, None, 256)]

    class Profile:
        bench = Bench()

    assert RegressionPolicy.from_profile(Profile()) == RegressionPolicy(
        (Tolerance("decode_tps_per_user", 3.0, 2, None), Tolerance("ttft_p99_ms", 50.0, None, 256)))
    Bench.regression_tolerance = None
    assert RegressionPolicy.from_profile(Profile()) == RegressionPolicy(())


# --- the verdict of one change ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("worse", "tolerance", "noise", "overlap", "verdict"), [
    (5.0, 5.0, None, False, PASS),  # exactly the tolerance: allowed
    (-30.0, 5.0, None, False, PASS),  # better
    (5.1, 5.0, 8.0, True, WITHIN_NOISE),
    (8.0, 5.0, 8.0, True, WITHIN_NOISE),  # exactly the spread, repeats overlapping: noise may explain it
    (8.1, 5.0, 8.0, True, REGRESSION),  # past the spread
    (6.0, 5.0, 8.0, False, REGRESSION),  # inside the spread, but every repeat after is worse
    (6.0, 5.0, None, True, REGRESSION),  # no repeats: no measured noise to excuse it
])
def test_worse_than_tolerance_is_a_regression_unless_noise_explains_it(
        worse: float, tolerance: float, noise: float | None, overlap: bool, verdict: str) -> None:
    assert judge_change(worse, tolerance, noise, overlap) == verdict


def test_the_spread_is_max_minus_min_over_the_median() -> None:
    assert spread_percent([10.0, 12.0, 11.0]) == pytest.approx(2 / 11 * 100)
    assert spread_percent([-10.0, -12.0, -11.0]) == pytest.approx(2 / 11 * 100)
    assert spread_percent([0.0, 0.0]) == 0.0 and spread_percent([5.0]) is None


def test_repeats_overlap_when_the_best_after_reaches_the_worst_before() -> None:
    before, after = cell(1, 128, [30.0, 32.0]), cell(1, 128, [28.0, 30.0])
    assert repeats_overlap(before, after, DECODE)  # higher is better: 30 after reaches 30 before
    assert not repeats_overlap(before, cell(1, 128, [28.0, 29.9]), DECODE)
    slow, fast = cell(1, 128, [30.0, 30.0], [100.0, 110.0]), cell(1, 128, [30.0, 30.0], [110.0, 120.0])
    assert repeats_overlap(slow, fast, TTFT50)  # lower is better: 110 after reaches 110 before
    assert not repeats_overlap(slow, cell(1, 128, [30.0, 30.0], [110.1, 120.0]), TTFT50)
    assert repeats_overlap(cell(1, 128, [30.0]), cell(1, 128, [30.0]), DECODE)  # one measurement each


# --- whole results ---------------------------------------------------------------------------------------------

def test_a_drop_beyond_tolerance_inside_overlapping_noise_is_within_noise_and_described() -> None:
    comparison = compare(result(cell(1, 512, [100.0, 110.0, 90.0])), result(cell(1, 512, [96.0, 104.0, 92.0])),
                         POLICY)
    decode = row(comparison, "decode_tps_per_user", "C=1 in=512")
    assert (decode.before, decode.after, decode.change_percent) == (100.0, 96.0, -4.0)
    assert decode.noise_percent == pytest.approx(20.0) and decode.verdict == PASS
    comparison = compare(result(cell(1, 512, [100.0, 110.0, 90.0])), result(cell(1, 512, [94.0, 104.0, 92.0])),
                         POLICY)
    assert comparison.verdict == WITHIN_NOISE
    assert comparison.summary() == ("within noise: decode C=1 in=512: 100.0 → 94.0 tok/s (-6.0 %, within noise "
                                    "±20.0 %, tolerance 5 %)")


def test_every_repeat_slower_is_a_regression_even_inside_a_wide_spread() -> None:
    comparison = compare(result(cell(1, 512, [100.0, 101.0, 80.0])), result(cell(1, 512, [79.0, 78.0, 79.5])),
                         POLICY)
    assert comparison.verdict == REGRESSION and comparison.regressed
    assert comparison.summary() == ("regression: decode C=1 in=512: 100.0 → 79.0 tok/s (-21.0 %, regression: "
                                    "beyond tolerance 5 %, not explained by noise ±21.0 %)")


def test_a_cell_lost_after_is_a_regression_and_one_new_after_is_only_shown() -> None:
    before = result(cell(1, 128, [30.0, 31.0]), cell(2, 128, [20.0, 21.0]))
    after = result(cell(1, 128, [30.0, 31.0]), cell(2, 128, [20.0, 21.0], status="failed"), cell(4, 128, [9.0, 9.5]))
    comparison = compare(before, after, POLICY)
    lost, new = row(comparison, "decode_tps_per_user", "C=2 in=128"), row(comparison, "decode_tps_per_user",
                                                                             "C=4 in=128")
    assert (lost.before, lost.after, lost.verdict, lost.note) == (20.5, None, REGRESSION, "failed or missing after")
    assert lost.describe() == "decode C=2 in=128: 20.5 → – tok/s (failed or missing after)"
    assert (new.before, new.verdict, new.note) == (None, "", "failed or missing before")
    assert comparison.verdict == REGRESSION
    assert comparison.summary() == "regression: decode C=2 in=128: 20.5 → – tok/s (failed or missing after)"
    unjudged = row(comparison, "output_tps", "C=2 in=128")
    assert (unjudged.verdict, unjudged.note) == ("", "failed or missing after")


def test_the_worst_judged_row_decides_and_unjudged_rows_are_described_as_such() -> None:
    before = result(cell(1, 128, [30.0, 30.0]), cell(1, 512, [30.0, 30.0]))
    after = result(cell(1, 128, [29.7, 29.7]), cell(1, 512, [29.0, 29.0]))  # -1 % and -3.3 %: both pass
    comparison = compare(before, after, POLICY)
    assert comparison.verdict == PASS
    assert comparison.deciding_cell() == row(comparison, "decode_tps_per_user", "C=1 in=512")
    assert comparison.summary().startswith("pass: decode C=1 in=512: 30.0 → 29.0 tok/s (-3.3 %, pass: tolerance 5 %, "
                                           "noise ±0.0 %)")
    assert compare(result(), result(), POLICY).summary() == "pass: no cells to compare"


@pytest.mark.xfail(strict=True, reason="Cell.describe formats the tolerance before knowing the row is judged: a row "
                                       "no rule judges raises TypeError (None:g)")
def test_a_row_no_rule_judges_is_described_as_not_judged() -> None:
    comparison = compare(result(cell(1, 128, [30.0, 30.0])), result(cell(1, 128, [29.7, 29.7])), POLICY)
    assert row(comparison, "output_tps").describe() == ("output C=1 in=128: 60.0 → 59.4 tok/s (-1.0 %, not judged, "
                                                        "noise ±0.0 %)")
    single = compare(result(cell(1, 64, [30.0])), result(cell(1, 64, [31.0])), RegressionPolicy(()))
    assert single.summary() == "pass: decode C=1 in=64: 30.0 → 31.0 tok/s (+3.3 %, not judged, noise no repeats)"


def test_lower_is_better_metrics_get_worse_when_they_rise() -> None:
    before, after = result(cell(1, 64, [30.0, 30.0], [100.0, 100.0])), result(cell(1, 64, [30.0, 30.0], [130.0, 130.0]))
    comparison = compare(before, after, POLICY)
    ttft = row(comparison, "ttft_p50_ms", "C=1 in=64")
    assert (ttft.change_percent, ttft.worse_percent, ttft.verdict) == (30.0, 30.0, REGRESSION)
    assert row(comparison, "decode_tps_per_user", "C=1 in=64").worse_percent == 0.0


def test_a_zero_before_is_no_change_rather_than_a_division_by_zero() -> None:
    comparison = compare(result(cell(1, 64, [0.0, 0.0])), result(cell(1, 64, [5.0, 5.0])), POLICY)
    assert row(comparison, "decode_tps_per_user", "C=1 in=64").change_percent == 0.0


def test_cells_are_compared_only_with_their_own_kind_completions_first() -> None:
    before = result(cell(2, 128, [30.0, 30.0]), cell(1, 128, [50.0, 50.0], endpoint="chat"),
                    cell(1, 512, [30.0, 30.0]), cell(1, 128, [30.0, 30.0]))
    after = result(cell(1, 128, [50.0, 50.0], endpoint="chat"), cell(1, 128, [30.0, 30.0]),
                   cell(1, 512, [30.0, 30.0]), cell(2, 128, [30.0, 30.0]), driver="595")
    comparison = compare(before, after, POLICY)
    assert list(dict.fromkeys(c.where for c in comparison.cells)) == [
        "C=1 in=128", "C=1 in=512", "C=2 in=128", "C=1 in=128 (chat)"]
    assert [c.metric for c in comparison.cells[:len(METRICS)]] == list(METRICS)
    assert comparison.verdict == PASS
    assert (comparison.before_metadata, comparison.after_metadata) == ({"driver_version": "590"},
                                                                      {"driver_version": "595"})
    assert compare({"cells": []}, {"cells": []}, POLICY).before_metadata == {}


def test_overall_regression_beats_within_noise_beats_pass() -> None:
    def judged(verdict: str) -> Cell:
        return Cell(1, 1, DECODE, 1.0, 1.0, 0.0, None, 1.0, verdict)

    assert overall([judged(PASS), judged(WITHIN_NOISE), judged(REGRESSION)]) == REGRESSION
    assert overall([judged(PASS), judged(WITHIN_NOISE), judged("")]) == WITHIN_NOISE
    assert overall([judged(PASS), judged("")]) == PASS and overall([]) == PASS


def test_a_metric_missing_from_a_block_is_none_not_zero() -> None:
    assert DECODE.read({}) is None and OUTPUT.read({}) is None and OUTPUT.read({"output_throughput": 3}) == 3.0
    assert ITL99.read({"itl_ms": {"p99": 7}}) == 7.0 and TTFT99.read({"ttft_ms": None}) is None
    assert ITL50.read({"itl_ms": {"median": 4}}) == 4.0


def test_the_rule_naming_both_fields_beats_one_naming_concurrency_alone_whatever_their_order() -> None:
    policy = RegressionPolicy((Tolerance("decode_tps_per_user", 10.0, 8, None),
                               Tolerance("decode_tps_per_user", 3.0, 8, 512)))
    assert policy.tolerance("decode_tps_per_user", 8, 512) == 3.0
    assert policy.tolerance("decode_tps_per_user", 8, 128) == 10.0


def test_a_profile_without_rules_or_a_rule_without_cell_fields_reads_as_none() -> None:
    class Bench:
        pass

    class Profile:
        bench = Bench()

    assert RegressionPolicy.from_profile(Profile()) == RegressionPolicy(())

    class Rule:  # a rule object that names neither concurrency nor input_tokens
        metric, max_worse_percent = "ttft_p99_ms", 50

    Bench.regression_tolerance = [Rule()]
    assert RegressionPolicy.from_profile(Profile()) == RegressionPolicy((Tolerance("ttft_p99_ms", 50.0),))


def test_one_measurement_each_is_judged_without_noise_to_excuse_it() -> None:
    comparison = compare(result(cell(1, 64, [30.0])), result(cell(1, 64, [20.0])), POLICY)
    assert comparison.verdict == REGRESSION
    assert comparison.summary() == ("regression: decode C=1 in=64: 30.0 → 20.0 tok/s (-33.3 %, regression: beyond "
                                    "tolerance 5 %, not explained by noise no repeats)")


def test_a_cell_new_after_says_what_it_measured_and_a_row_without_values_is_not_comparable() -> None:
    comparison = compare(result(), result(cell(4, 128, [9.0, 9.5])), POLICY)
    assert row(comparison, "decode_tps_per_user", "C=4 in=128").describe() == (
        "decode C=4 in=128: – → 9.2 tok/s (failed or missing before)")
    assert Cell(1, 1, DECODE, None, None, None, None, None, "").describe() == "decode C=1 in=1: – → – tok/s (not " \
                                                                             "comparable)"
    assert compare({}, {}, POLICY).cells == ()


def test_a_lost_cell_decides_over_a_drop_within_noise_and_that_over_a_larger_passing_drop() -> None:
    before = result(cell(1, 512, [100.0, 110.0, 90.0]), cell(2, 128, [20.0, 21.0]), cell(8, 128, [10.0, 10.0]))
    after = result(cell(1, 512, [94.0, 104.0, 92.0]), cell(8, 128, [9.2, 9.2]))  # -6 % within noise; -8 % passes
    assert compare(before, after, POLICY).deciding_cell().where == "C=2 in=128"
    without_loss = compare(before, after | {"cells": [*after["cells"], cell(2, 128, [20.0, 21.0])]}, POLICY)
    assert without_loss.verdict == WITHIN_NOISE and without_loss.deciding_cell().where == "C=1 in=512"


def test_with_nothing_judged_the_first_decode_row_is_the_one_to_show() -> None:
    comparison = compare(result(cell(1, 64, [30.0, 30.0])), result(cell(1, 64, [31.0, 31.0])), RegressionPolicy(()))
    assert comparison.deciding_cell() == row(comparison, "decode_tps_per_user", "C=1 in=64")
