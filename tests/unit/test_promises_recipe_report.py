"""Promise: a recipe experiment's report ranks only recipes that measured cleanly, calls one better only when every
repeat beat every repeat of the starting recipe, and says why each disqualified one was (rigforge/recipes/report.py).
The bench results are constructed (two repeats per cell, numbers chosen to land each verdict); the report of a
real sandbox run is in docs/recipes.md.
"""

from __future__ import annotations

from typing import Any

import pytest

from rigforge.bench.config import COMPLETIONS, CellKind
from rigforge.recipes.report import (
    BETTER,
    DISQUALIFIED,
    NOT_BETTER,
    START,
    RecipeVerdict,
    Trial,
    build_report,
    claim_cell,
    claims_table,
    decode_c1,
    image_line,
    improved_beyond_noise,
    metric,
    report_json,
    report_markdown,
    report_table,
    short,
    where,
    wrong_output,
)
from rigforge.updates.comparison import RegressionPolicy, Tolerance
from tests.unit.test_promises_comparison import cell, result

CHAT_KIND = CellKind("chat")
POLICY = RegressionPolicy((Tolerance("decode_tps_per_user", 5.0),))
CHAT = cell(1, 128, [50.0, 51.0], endpoint="chat")
CLAIM = {"metric": "decode_tps_per_user", "value": 40, "concurrency": 1, "measured": "greedy, 1 request",
         "source": "a blog"}
CLAIM_ELSEWHERE = {"metric": "output_tps", "value": 100, "concurrency": 2, "input_tokens": 512, "measured": "x",
                   "source": "y"}
BROKE = "did not come up: known failure x (fail): it broke; fix: do y (journal: the line)"
TRIALS = [
    Trial("default", "d", "s", result(cell(2, 128, [20.0, 21.0]), cell(1, 128, [30.0, 31.0]), CHAT), "results/h/1",
          claims=(CLAIM, CLAIM_ELSEWHERE), image="rigforge/vllm:aa",
          image_git_refs={"VLLM_REF": {"ref": "v1", "commit": "c" * 8}}),
    Trial("fast", "d", "s", result(cell(1, 128, [33.0, 34.0]), cell(2, 128, [23.0, 24.0]), CHAT), "results/h/2"),
    Trial("faster", "d", "s", result(cell(1, 128, [35.0, 36.0]), cell(2, 128, [21.5, 22.0]), CHAT), "results/h/3"),
    Trial("slow", "d", "s", result(cell(1, 128, [20.0, 21.0]), cell(2, 128, [20.0, 21.0]), CHAT), "results/h/4"),
    Trial("same", "d", "s", result(cell(1, 128, [30.0, 31.0]), cell(2, 128, [20.0, 21.0], status="failed")),
          "results/h/5"),
    Trial("broken", "d", "s", None, None, BROKE),
]

#: Reviewed by hand: fast and faster beat every repeat of default somewhere; faster is the faster at C=1, so best;
#: slow lost 33 % at C=1; same lost its C=2 cell; broken never came up.
REPORT = "\n".join([
    '# Recipe experiment on rig-a, 20261126T1400Z',
    "",
    ("Started on **default**; medians over the bench's repeats, decode tok/s per user / output tok/s. "
     "Verdicts: rigforge.updates.comparison under the profile's bench.regression_tolerance; better beyond "
     'noise = every repeat better.'),
    "",
    '| recipe | C=1 in=128 | C=2 in=128 | C=1 in=128 (chat) | verdict against default |',
    '|---|---|---|---|---|',
    '| default | 30.5 / 61.0 | 20.5 / 41.0 | 50.5 / 101.0 | start |',
    ('| fast | 33.5 / 67.0 | 23.5 / 47.0 | 50.5 / 101.0 | better beyond noise: decode C=2 in=128: 20.5 → '
     '23.5 tok/s (+14.6 %, pass: tolerance 5 %, noise ±4.9 %) |'),
    ('| faster | 35.5 / 71.0 | 21.8 / 43.5 | 50.5 / 101.0 | better beyond noise: decode C=1 in=128: 30.5 '
     '→ 35.5 tok/s (+16.4 %, pass: tolerance 5 %, noise ±3.3 %) |'),
    ('| slow | 20.5 / 41.0 | 20.5 / 41.0 | 50.5 / 101.0 | slower (regression): regression: decode C=1 '
     'in=128: 30.5 → 20.5 tok/s (-32.8 %, regression: beyond tolerance 5 %, not explained by… |'),
    ('| same | 30.5 / 61.0 | – / – | – / – | slower (regression): regression: decode C=2 in=128: 20.5 → – '
     'tok/s (failed or missing after) |'),
    '| broken | – / – | – / – | – / – | disqualified: did not come up: known failure x (fail): it broke |',
    "",
    '## Claimed beside measured',
    "",
    '| recipe | claimed | how the source measured it | source | measured here | here / claimed |',
    '|---|---|---|---|---|---|',
    '| default | 40 decode tok/s (C=1) | greedy, 1 request | a blog | 30.5 (C=1 in=128) | 0.76 |',
    '| default | 100 output tok/s (C=2 in=512) | x | y | not measured | – |',
    "",
    '## Images',
    "",
    '- **default**: rigforge/vllm:aa (VLLM_REF v1 = cccccccc)',
    '- **fast**: no image (a native engine, or it never got one)',
    '- **faster**: no image (a native engine, or it never got one)',
    '- **slow**: no image (a native engine, or it never got one)',
    '- **same**: no image (a native engine, or it never got one)',
    '- **broken**: no image (a native engine, or it never got one)',
    "",
    '## Disqualified',
    "",
    '- **broken**: did not come up: known failure x (fail): it broke; fix: do y (journal: the line)',
    "",
    'Best: faster',
]) + "\n"


def test_the_report_says_each_recipes_verdict_its_numbers_claims_images_and_the_best() -> None:
    assert report_markdown(build_report(TRIALS, "default", POLICY), "rig-a", "20261126T1400Z") == REPORT


def test_the_report_data_holds_what_the_table_shows() -> None:
    data = report_json(build_report(TRIALS, "default", POLICY), "rig-a", "20261126T1400Z")
    assert {key: data[key] for key in ("host", "stamp", "start", "best", "cells")} == {
        "host": "rig-a", "stamp": "20261126T1400Z", "start": "default", "best": "faster",
        "cells": ["C=1 in=128", "C=2 in=128", "C=1 in=128 (chat)"]}
    default, fast, *_, broken = data["recipes"]
    assert default == {
        "recipe": "default", "description": "d", "source": "s", "run_dir": "results/h/1", "disqualified": None,
        "claims": [CLAIM, CLAIM_ELSEWHERE], "image": "rigforge/vllm:aa",
        "image_git_refs": {"VLLM_REF": {"ref": "v1", "commit": "cccccccc"}},
        "measured": {"C=1 in=128": {"decode_tps_per_user": 30.5, "output_tps": 61.0},
                     "C=2 in=128": {"decode_tps_per_user": 20.5, "output_tps": 41.0},
                     "C=1 in=128 (chat)": {"decode_tps_per_user": 50.5, "output_tps": 101.0}},
        "verdict": START, "detail": "the recipe the rig started on", "decode_c1": 30.5}
    assert (fast["verdict"], fast["decode_c1"], fast["image"], fast["image_git_refs"]) == (BETTER, 33.5, None, {})
    assert fast["detail"] == "decode C=2 in=128: 20.5 → 23.5 tok/s (+14.6 %, pass: tolerance 5 %, noise ±4.9 %)"
    assert {key: broken[key] for key in ("run_dir", "disqualified", "verdict", "detail", "decode_c1")} == {
        "run_dir": None, "disqualified": BROKE, "verdict": DISQUALIFIED, "detail": BROKE, "decode_c1": None}
    assert broken["measured"]["C=1 in=128"] == {"decode_tps_per_user": None, "output_tps": None}


def test_without_a_measured_start_nothing_is_called_better() -> None:
    trials = [Trial("default", "d", "s", None, None, "wrong output: probe_capital: x"), TRIALS[2],
              Trial("unmeasured", "d", "s")]
    report = build_report(trials, "default", POLICY)
    assert report.verdicts == (
        RecipeVerdict("default", DISQUALIFIED, "wrong output: probe_capital: x"),
        RecipeVerdict("faster", NOT_BETTER, "no measured starting recipe to compare with", 35.5),
        RecipeVerdict("unmeasured", NOT_BETTER, "no measured starting recipe to compare with", None))
    assert report.best is None and report.passed == ("faster",)
    assert build_report([TRIALS[1]], "gone", POLICY).verdicts[0].detail == "no measured starting recipe to compare with"


def test_a_regression_and_a_plain_result_keep_their_decode_rate() -> None:
    report = build_report(TRIALS[:1] + TRIALS[3:5], "default", POLICY)
    assert [(v.verdict, v.decode_c1) for v in report.verdicts] == [(START, 30.5), ("slower (regression)", 20.5),
                                                                   ("slower (regression)", 30.5)]
    same = build_report([TRIALS[0], Trial("same", "d", "s", TRIALS[0].result)], "default", POLICY).verdicts[1]
    assert (same.verdict, same.decode_c1) == (NOT_BETTER, 30.5)
    assert same.detail.startswith("pass: decode C=1 in=128: 30.5 → 30.5 tok/s (+0.0 %")


@pytest.mark.parametrize(("before", "after", "better"), [
    ([30.0, 31.0], [31.5, 32.0], True),
    ([30.0, 31.0], [31.0, 32.0], False),  # a tie with the best repeat before is not beyond noise
    ([30.0], [40.0, 41.0], False),  # one repeat: no noise measured, no claim
    ([30.0, 31.0], [40.0], False),
])
def test_better_beyond_noise_means_every_repeat_after_beats_every_repeat_before(
        before: list[float], after: list[float], better: bool) -> None:
    assert improved_beyond_noise(cell(1, 1, before, ttfts=[100.0] * len(before)) | {"repeats": _repeats(before)},
                                 cell(1, 1, after) | {"repeats": _repeats(after)}, metric("decode_tps_per_user")) \
        is better


def test_for_a_lower_is_better_metric_every_repeat_after_must_be_lower() -> None:
    ttft = metric("ttft_p50_ms")
    before = cell(1, 1, [30.0, 30.0], ttfts=[100.0, 110.0])
    assert improved_beyond_noise(before, cell(1, 1, [30.0, 30.0], ttfts=[90.0, 99.0]), ttft)
    assert not improved_beyond_noise(before, cell(1, 1, [30.0, 30.0], ttfts=[90.0, 100.0]), ttft)


def _repeats(decodes: list[float]) -> list[dict[str, Any]]:
    return [{"decode_tps_per_user": {"median": value}} for value in decodes]


def test_the_decode_rate_shown_is_the_first_clean_completion_cell() -> None:
    mixed = result(cell(2, 64, [9.0, 9.0]), cell(1, 512, [7.0, 7.0]), cell(1, 128, [8.0, 8.0], status="failed"),
                   cell(1, 64, [50.0, 50.0], endpoint="chat"))
    assert decode_c1(mixed) == 7.0
    assert decode_c1({}) is None and decode_c1(result(CHAT)) is None


def test_a_claim_is_shown_beside_its_own_cell() -> None:
    cells = [(CHAT_KIND, 1, 64), (COMPLETIONS, 1, 512), (COMPLETIONS, 1, 128), (COMPLETIONS, 2, 128)]
    assert claim_cell({"concurrency": 1}, cells) == (COMPLETIONS, 1, 128)
    assert claim_cell({"concurrency": 1, "input_tokens": 512}, cells) == (COMPLETIONS, 1, 512)
    assert claim_cell({"concurrency": 1, "input_tokens": 64}, cells) is None  # only a chat cell there
    assert claim_cell({"concurrency": 4}, cells) is None


def test_a_table_cell_keeps_the_reason_without_its_fix_or_log_line_and_within_its_width() -> None:
    assert short(BROKE) == "did not come up: known failure x (fail): it broke"
    assert short("broke; fix: a; fix: b") == "broke"
    assert short("cell failed (journal: a; fix: b) (journal: c)") == "cell failed"
    assert short("x" * 110) == "x" * 110
    assert short("x" * 111) == "x" * 109 + "…"
    assert short("abcdef", width=4) == "abc…"


def test_a_result_without_probes_checks_or_cells_has_nothing_wrong() -> None:
    assert wrong_output({}) == ""
    assert wrong_output({"sanity": {}, "cells": [{"status": "ok"}]}) == ""


def test_the_table_orders_cells_by_concurrency_then_prompt_and_keeps_table_syntax_out_of_reasons() -> None:
    start = Trial("default", "d", "s", result(cell(2, 128, [20.0, 21.0]), cell(1, 512, [30.0, 31.0])), "r/1")
    odd = Trial("odd", "d", "s", {"metadata": {}}, "r/2", "wrong output: probe_capital: 'A | B'")
    report = build_report([start, odd], "default", POLICY)
    assert [where(key) for key in report.cells] == ["C=1 in=512", "C=2 in=128"]
    assert report_table(report)[-1] == "| odd | – / – | – / – | disqualified: wrong output: probe_capital: 'A / B' |"


def test_a_claim_in_a_cell_this_recipe_did_not_measure_is_not_measured() -> None:
    claim = {"metric": "decode_tps_per_user", "value": 20, "concurrency": 2, "input_tokens": 128, "measured": "m",
             "source": "s"}
    lost = Trial("same", "d", "s", TRIALS[4].result, "r/5", claims=(claim,))
    table = claims_table(build_report([TRIALS[0], lost], "default", POLICY))
    assert table[-1] == "| same | 20 decode tok/s (C=2 in=128) | m | s | not measured | – |"


def test_an_image_line_names_every_ref_and_nothing_when_there_are_none() -> None:
    refs = {"VLLM_REF": {"ref": "v1", "commit": "a"}, "FLASHINFER_REF": {"ref": "v2", "commit": "b"}}
    assert image_line(Trial("x", "d", "s", image="rigforge/vllm:1", image_git_refs=refs)) == (
        "rigforge/vllm:1 (VLLM_REF v1 = a, FLASHINFER_REF v2 = b)")
    assert image_line(Trial("x", "d", "s", image="rigforge/vllm:1")) == "rigforge/vllm:1"
