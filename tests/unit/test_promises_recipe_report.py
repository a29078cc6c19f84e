"""Promise: a recipe experiment's report ranks only recipes that measured cleanly, keeps as best only a recipe
judged better on the profile's primary metric (the others can only veto), claims nothing against a start that was
not measured or measured in one engine start, and says why each disqualified one was (rigforge/recipes/report.py,
cells.py). The bench results are constructed (a side: one result per engine start, tests/unit/
test_promises_comparison.py's helpers; numbers chosen to land each verdict); the same report on recorded sandbox
runs: tests/unit/test_recipes.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from rigforge.bench.config import COMPLETIONS, CellKind
from rigforge.recipes.cells import decode_c1, primary_label, primary_value, repeats_of
from rigforge.recipes.report import (
    BETTER,
    CANNOT_TELL,
    DISQUALIFIED,
    START,
    WORSE,
    RecipeVerdict,
    Trial,
    build_report,
    claim_cell,
    claims_table,
    image_line,
    report_json,
    report_markdown,
    report_table,
    short,
    where,
    wrong_output,
)
from rigforge.updates.comparison import Primary, RegressionPolicy, Tolerance
from tests.unit.test_promises_comparison import TIGHT, cell, repeat, result, scaled

CHAT_KIND = CellKind("chat")
#: Decode may get 5 % worse anywhere; the primary: decode at C=1 in=128.
POLICY = RegressionPolicy((Tolerance("decode_tps_per_user", 5.0),), Primary("decode_tps_per_user", 1, 128))
CHAT = cell(1, 128, scaled(TIGHT, 5 / 3), endpoint="chat")
CLAIM = {"metric": "decode_tps_per_user", "value": 40, "concurrency": 1, "measured": "greedy, 1 request",
         "source": "a blog"}
CLAIM_ELSEWHERE = {"metric": "output_tps", "value": 100, "concurrency": 2, "input_tokens": 512, "measured": "x",
                   "source": "y"}
BROKE = "did not come up: known failure x (fail): it broke; fix: do y (journal: the line)"


def measured(c1: float, c2: float, *more: dict[str, Any], status: str = "ok") -> list[dict[str, Any]]:
    """A result with C=1 in=128 (the primary) at ``c1`` and C=2 in=128 at ``c2`` times the start, ±0.1 % repeats."""
    return result(cell(1, 128, scaled(TIGHT, c1)), cell(2, 128, scaled(TIGHT, 2 / 3 * c2), status=status), *more)


def side_trial(name: str, side: list[dict[str, Any]], disqualified: str = "", **fields: Any) -> Trial:
    """A recipe measured in the engine starts of ``side`` (one result each)."""
    return Trial(name, "d", "s", side[0], fields.pop("run_dir", f"results/h/{name}"), disqualified,
                 later=tuple(side[1:]), **fields)


def started(name: str, c1: float, c2: float, chat: bool = True, status: str = "ok", **fields: Any) -> Trial:
    """A recipe measured in three engine starts ±0.1 % apart (``measured`` at c1, c2)."""
    return side_trial(name, measured(c1, c2, *([CHAT] if chat else []), status=status), **fields)


START_RESULT = measured(1.0, 1.0, CHAT)[0]  # one start's result
TRIALS = [
    started("default", 1.0, 1.0, run_dir="results/h/1", claims=(CLAIM, CLAIM_ELSEWHERE), image="rigforge/vllm:aa",
            image_git_refs={"VLLM_REF": {"ref": "v1", "commit": "c" * 8}}),
    started("fast", 1.1, 1.0),  # +10 % on the primary
    started("faster", 1.2, 1.0),  # +20 % on the primary
    started("elsewhere", 1.0, 1.5),  # +50 %, but not on the primary
    started("vetoed", 1.5, 0.8),  # +50 % on the primary, -20 % at C=2
    started("lost", 1.5, 1.0, chat=False, status="failed"),  # its C=2 cell failed after
    Trial("broken", "d", "s", None, None, BROKE),
]


def rounded(data: Any) -> Any:
    """``data`` with every float rounded to 3 places (start values are geometric means)."""
    if isinstance(data, dict):
        return {key: rounded(value) for key, value in data.items()}
    if isinstance(data, list):
        return [rounded(value) for value in data]
    return round(data, 3) if isinstance(data, float) else data


def verdicts(report: Any) -> dict[str, str]:
    return {verdict.recipe: verdict.verdict for verdict in report.verdicts}


def test_only_the_primary_makes_a_recipe_better_and_the_best_is_the_best_primary() -> None:
    report = build_report(TRIALS, "default", POLICY)
    # elsewhere: +50 % on a judged metric other than the primary is not better, and (since issue 49) not same either
    assert verdicts(report) == {"default": START, "fast": BETTER, "faster": BETTER, "elsewhere": CANNOT_TELL,
                                "vetoed": WORSE, "lost": WORSE, "broken": DISQUALIFIED}
    assert report.best == "faster" and report.primary == "decode C=1 in=128"
    fast = report.verdicts[1]
    assert fast.primary == pytest.approx(33.0) and fast.decode_c1 == pytest.approx(33.0)
    assert fast.detail.startswith("decode C=1 in=128: 30.0 → 33.0 tok/s (+10.0 %; 97.5 % interval +9.7 … +10.3 % "
                                  "past tolerance 5 % (p = ")
    assert fast.detail.endswith(", 3 vs 3 starts))")
    assert report.passed == ("default", "fast", "faster", "elsewhere", "vetoed", "lost")


def test_for_a_lower_is_better_primary_the_best_is_the_lowest() -> None:
    policy = RegressionPolicy((Tolerance("ttft_p50_ms", 5.0),), Primary("ttft_p50_ms", 1, 128))

    def ttft(name: str, factor: float) -> Trial:
        return side_trial(name, result(cell(1, 128, TIGHT, scaled(TIGHT, 10 * factor))))

    trials = [ttft("default", 1.0), ttft("quick", 0.8), ttft("quicker", 0.6), ttft("slow", 1.3)]
    report = build_report(trials, "default", policy)
    assert verdicts(report) == {"default": START, "quick": BETTER, "quicker": BETTER, "slow": WORSE}
    assert report.best == "quicker"


def test_without_a_measured_start_nothing_is_called_better() -> None:
    trials = [Trial("default", "d", "s", START_RESULT, None, "wrong output: probe_capital: x"), TRIALS[2],
              Trial("unmeasured", "d", "s")]
    report = build_report(trials, "default", POLICY, [START_RESULT])
    assert report.verdicts == (
        RecipeVerdict("default", DISQUALIFIED, "wrong output: probe_capital: x"),
        RecipeVerdict("faster", CANNOT_TELL, "no measured starting recipe to compare with", pytest.approx(36.0)),
        RecipeVerdict("unmeasured", CANNOT_TELL, "no measured starting recipe to compare with", None))
    assert report.best is None and report.passed == ("faster",)
    assert build_report([TRIALS[1]], "gone", POLICY).verdicts[0].detail == "no measured starting recipe to compare with"
    assert "Best: none judged better than default" in report_markdown(report, "h", "s")


def test_without_a_primary_no_recipe_is_kept_as_best() -> None:
    report = build_report(TRIALS[:3], "default", RegressionPolicy(POLICY.tolerances))
    assert BETTER not in verdicts(report).values() and report.best is None
    assert report.primary == "" and report.verdicts[0].primary is None


@pytest.mark.parametrize(("status", "reason"), [("failed", "HTTP 500: engine died"), ("timeout", "no answer")])
def test_a_failed_or_timed_out_cell_is_what_disqualifies(status: str, reason: str) -> None:
    faster = result(cell(1, 128, TIGHT), cell(4, 128, TIGHT, status=status))[0]
    faster["cells"][-1]["reason"] = reason
    assert wrong_output(faster) == f"cell C=4 in=128 failed: {reason}"
    report = build_report([TRIALS[0], Trial("faster", "d", "s", faster, "r", wrong_output(faster))], "default", POLICY)
    assert verdicts(report)["faster"] == DISQUALIFIED and report.best is None


def test_what_disqualifies_a_result_first_a_probe_then_a_check_then_a_cell() -> None:
    failed_cell = result(cell(1, 1, TIGHT), cell(2, 2, TIGHT, status="failed"))[0]
    failed_cell["cells"][1]["reason"] = "r"
    assert wrong_output(failed_cell) == "cell C=2 in=2 failed: r"
    checks = failed_cell | {"failed_checks": ["a", "b", "c", "d", "e"]}
    assert wrong_output(checks) == "failed checks: a, b, c, d"
    probes = checks | {"sanity": {"probes": [{"name": "ok", "passed": True, "detail": ""},
                                             {"name": "probe_capital", "passed": False, "detail": "x"}]}}
    assert wrong_output(probes) == "wrong output: probe_capital: x"
    assert wrong_output({}) == "" and wrong_output({"sanity": {}, "cells": [{"status": "ok"}]}) == ""


#: Reviewed by hand against the verdicts above.
REPORT_START = [
    "# Recipe experiment on rig-a, 20261126T1400Z",
    "",
    ("Started on **default**; each recipe measured in its own engine starts (interleaved rounds), the median over "
     "its starts of each start's value (the geometric mean of its repeats), decode tok/s per user / output tok/s. "
     "Verdicts (docs/bench.md#verdicts) compare one value per start: better only on the primary metric (decode C=1 "
     "in=128), its whole interval past its tolerance, and confirmed in new starts or labelled unconfirmed; worse "
     "(regression) on any judged metric the same way; same when every judged metric is surely inside its "
     "tolerance; cannot tell otherwise, with what the starts resolve."),
    "",
    "| recipe | C=1 in=128 | C=2 in=128 | C=1 in=128 (chat) | verdict against default |",
    "|---|---|---|---|---|",
    "| default | 30.0 / 60.0 | 20.0 / 40.0 | 50.0 / 100.0 | start |",
]


def test_the_report_says_each_recipes_verdict_its_numbers_claims_images_and_the_best() -> None:
    report = build_report(TRIALS, "default", POLICY, ["fast: 1 more round (2 starts), 40 s"], [["default", "fast"]])
    lines = report_markdown(report, "rig-a", "20261126T1400Z").splitlines()
    assert lines[:len(REPORT_START)] == REPORT_START
    assert lines[7].startswith("| fast | 33.0 / 66.0 | 20.0 / 40.0 | 50.0 / 100.0 | better, unconfirmed: decode C=1 "
                               "in=128: 30.0 → 33.0 tok/s (+10.0 %; 97.5 % interval +9.7 … +10.3 % past toleran")
    assert lines[9].startswith("| elsewhere | 30.0 / 60.0 | 30.0 / 60.0 | 50.0 / 100.0 | cannot tell: a judged metric "
                               "other than the primary moved past its tolerance")
    assert lines[11] == ("| lost | 45.0 / 90.0 | – / – | – / – | worse (regression): decode C=2 in=128: 20.0 → – "
                         "tok/s (failed or missing after in 3 of 3 starts) |")
    assert lines[12] == "| broken | – / – | – / – | – / – | disqualified: did not come up: known failure x (fail): " \
                        "it broke |"
    # what the starts resolve, and every better not measured again labelled so (issue 49)
    resolves = ("3 vs 3 starts at a start-to-start spread of 0.1 %: a loss of 5.4 % or more is called worse, \"same\" "
                "needs a tolerance of ±0.3 % or wider (80 % power; tolerance 5 %)")
    unconfirmed = ("better, unconfirmed: only the best recipe judged better is measured again (roles/recipes_decide."
                   "confirm_best); keep=best never moves the rig to an unconfirmed one")
    assert lines[13:17] == ["", "## What the starts resolve", "", f"- fast: {resolves}"]
    assert lines[21:23] == [f"- fast: {unconfirmed}", f"- faster: {unconfirmed}"]
    del lines[13:23]
    assert lines[13:18] == ["", "## Engine starts", "", "- round 1: default fast",
                            "- default: decode C=1 in=128 per start: 30.0, 30.0, 30.0"]
    assert lines[22:27] == ["- lost: decode C=1 in=128 per start: 45.0, 45.0, 45.0", "",
                            "## More starts where a verdict could not tell", "",
                            "- fast: 1 more round (2 starts), 40 s"]
    del lines[13:27]
    assert lines[13:20] == [
        "", "## Claimed beside measured", "",
        "| recipe | claimed | how the source measured it | source | measured here | here / claimed |",
        "|---|---|---|---|---|---|",
        "| default | 40 decode tok/s (C=1) | greedy, 1 request | a blog | 30.0 (C=1 in=128) | 0.75 |",
        "| default | 100 output tok/s (C=2 in=512) | x | y | not measured | – |"]
    assert lines[20:25] == ["", "## Images", "", "- **default**: rigforge/vllm:aa (VLLM_REF v1 = cccccccc)",
                            "- **fast**: no image (a native engine, or it never got one)"]
    assert lines[-6:] == ["", "## Disqualified", "", "- **broken**: " + BROKE, "", "Best: faster"]
    plain = report_markdown(build_report(TRIALS[1:3], "fast", POLICY), "h", "s")
    assert "## More starts" not in plain and "## Claimed" not in plain and "## Disqualified" not in plain
    assert "- round" not in plain and plain.endswith("\n\nBest: faster\n")


def test_the_report_data_holds_what_the_table_shows() -> None:
    rounds = [["default", "fast"], ["fast", "default"]]
    data = report_json(build_report(TRIALS, "default", POLICY, ["x"], rounds), "rig-a", "20261126T1400Z")
    assert {key: data[key] for key in ("host", "stamp", "start", "best", "primary", "cells", "more_starts",
                                       "rounds")} == {
        "host": "rig-a", "stamp": "20261126T1400Z", "start": "default", "best": "faster",
        "primary": "decode C=1 in=128", "cells": ["C=1 in=128", "C=2 in=128", "C=1 in=128 (chat)"],
        "more_starts": ["x"], "rounds": rounds}
    default, fast, *_, broken = data["recipes"]
    assert default.pop("primary_per_start") == pytest.approx(TIGHT)
    assert rounded(default) == {
        "recipe": "default", "description": "d", "source": "s", "run_dir": "results/h/1", "disqualified": None,
        "claims": [CLAIM, CLAIM_ELSEWHERE], "image": "rigforge/vllm:aa",
        "image_git_refs": {"VLLM_REF": {"ref": "v1", "commit": "cccccccc"}}, "quality": None,
        "measured": {"C=1 in=128": {"decode_tps_per_user": 30.0, "output_tps": 60.0},
                     "C=2 in=128": {"decode_tps_per_user": 20.0, "output_tps": 40.0},
                     "C=1 in=128 (chat)": {"decode_tps_per_user": 50.0, "output_tps": 100.0}},
        "verdict": START, "detail": "the recipe the rig started on", "decode_c1": 30.0, "primary": 30.0,
        "starts_to_decide": None, "confirmed": False, "resolution": "", "set_aside": ""}
    assert (fast["verdict"], fast["decode_c1"], fast["image"], fast["image_git_refs"]) == (
        BETTER, pytest.approx(33.0), None, {})
    assert {key: broken[key] for key in ("run_dir", "disqualified", "verdict", "detail", "decode_c1")} == {
        "run_dir": None, "disqualified": BROKE, "verdict": DISQUALIFIED, "detail": BROKE, "decode_c1": None}
    assert broken["measured"]["C=1 in=128"] == {"decode_tps_per_user": None, "output_tps": None}


def test_cannot_tell_carries_how_many_engine_starts_would_decide() -> None:
    # sized at the tolerance since issue 49: at ±1 % starts a count resolves ±5 %, and the resolution is said
    start = side_trial("default", result(cell(1, 128, [29.7, 30.3])))
    maybe = side_trial("maybe", result(cell(1, 128, [32.0, 32.7])))
    verdict = build_report([start, maybe], "default", POLICY).verdicts[1]
    assert verdict.verdict == CANNOT_TELL and verdict.starts_to_decide is not None and verdict.starts_to_decide > 2
    assert f"about {verdict.starts_to_decide} engine starts a side would resolve ±5 %" in verdict.detail
    assert verdict.resolution.startswith("2 vs 2 starts at a start-to-start spread of") and \
        verdict.resolution in verdict.detail


def test_one_start_a_side_cannot_tell_however_steady_its_repeats() -> None:
    report = build_report([Trial("default", "d", "s", START_RESULT), Trial("x", "d", "s", measured(1.5, 1.5, CHAT)[0])],
                          "default", POLICY)
    assert report.verdicts[1].verdict == CANNOT_TELL and "one engine start" in report.verdicts[1].detail


def test_the_decode_rate_shown_is_the_first_clean_completion_cell() -> None:
    mixed = result(cell(2, 64, [9.0]), cell(1, 512, [7.0]), cell(1, 128, [8.0], status="failed"),
                   cell(1, 64, [50.0], endpoint="chat"))[0]
    assert decode_c1(mixed) == pytest.approx(7.0)
    assert decode_c1({}) is None and decode_c1(result(CHAT)[0]) is None


def test_the_primary_is_read_from_its_own_completion_cell_only() -> None:
    assert primary_value([START_RESULT], POLICY) == pytest.approx(30.0) and primary_label(POLICY) == "decode C=1 in=128"
    assert primary_value(TRIALS[0].starts, POLICY) == pytest.approx(30.0)  # the median over its starts
    assert primary_value(result(CHAT), POLICY) is None and primary_value([], POLICY) is None
    assert primary_value([START_RESULT], RegressionPolicy()) is None and primary_label(RegressionPolicy()) == ""
    repeated = {"cells": [{"concurrency": 1, "input_tokens": 128, "status": "ok",
                           "repeats": [repeat(value) for value in TIGHT]}]}
    assert repeats_of(repeated, "decode_tps_per_user", (COMPLETIONS, 1, 128)) == TIGHT
    assert repeats_of(None, "decode_tps_per_user", (COMPLETIONS, 1, 128)) == []


def test_a_claim_is_shown_beside_its_own_cell() -> None:
    cells = [(CHAT_KIND, 1, 64), (COMPLETIONS, 1, 512), (COMPLETIONS, 1, 128), (COMPLETIONS, 2, 128)]
    assert claim_cell({"concurrency": 1}, cells) == (COMPLETIONS, 1, 128)
    assert claim_cell({"concurrency": 1, "input_tokens": 512}, cells) == (COMPLETIONS, 1, 512)
    assert claim_cell({"concurrency": 1, "input_tokens": 64}, cells) is None  # only a chat cell there
    assert claim_cell({"concurrency": 4}, cells) is None


def test_a_claim_in_a_cell_this_recipe_did_not_measure_is_not_measured() -> None:
    claim = {"metric": "decode_tps_per_user", "value": 20, "concurrency": 2, "input_tokens": 128, "measured": "m",
             "source": "s"}
    lost = Trial("lost", "d", "s", TRIALS[5].result, "r/6", claims=(claim,))
    table = claims_table(build_report([TRIALS[0], lost], "default", POLICY))
    assert table[-1] == "| lost | 20 decode tok/s (C=2 in=128) | m | s | not measured | – |"
    zero = Trial("zero", "d", "s", START_RESULT, "r", claims=(claim | {"value": 0},))
    assert claims_table(build_report([zero], "zero", POLICY))[-1] == (
        "| zero | 0 decode tok/s (C=2 in=128) | m | s | 20.0 (C=2 in=128) | – |")


def test_a_table_cell_keeps_the_reason_without_its_fix_or_log_line_and_within_its_width() -> None:
    assert short(BROKE) == "did not come up: known failure x (fail): it broke"
    assert short("broke; fix: a; fix: b") == "broke"
    assert short("cell failed (journal: a; fix: b) (journal: c)") == "cell failed"
    assert short("x" * 110) == "x" * 110
    assert short("x" * 111) == "x" * 109 + "…"
    assert short("abcdef", width=4) == "abc…"


def test_the_table_orders_cells_by_concurrency_then_prompt_and_keeps_table_syntax_out_of_reasons() -> None:
    start = side_trial("default", result(cell(2, 128, [20.0, 21.0]), cell(1, 512, [30.0, 31.0])), run_dir="r/1")
    odd = Trial("odd", "d", "s", {"metadata": {}}, "r/2", "wrong output: probe_capital: 'A | B'")
    report = build_report([start, odd], "default", POLICY)
    assert [where(key) for key in report.cells] == ["C=1 in=512", "C=2 in=128"]
    assert report_table(report)[-1] == "| odd | – / – | – / – | disqualified: wrong output: probe_capital: 'A / B' |"


def test_an_image_line_names_every_ref_and_nothing_when_there_are_none() -> None:
    refs = {"VLLM_REF": {"ref": "v1", "commit": "a"}, "FLASHINFER_REF": {"ref": "v2", "commit": "b"}}
    assert image_line(Trial("x", "d", "s", image="rigforge/vllm:1", image_git_refs=refs)) == (
        "rigforge/vllm:1 (VLLM_REF v1 = a, FLASHINFER_REF v2 = b)")
    assert image_line(Trial("x", "d", "s", image="rigforge/vllm:1")) == "rigforge/vllm:1"


def test_a_report_without_a_primary_says_none_was_declared() -> None:
    markdown = report_markdown(build_report(TRIALS[:2], "default", RegressionPolicy(POLICY.tolerances)), "h", "s")
    assert "better only on the primary metric (none declared), its whole interval" in markdown


def test_a_recipe_with_no_cell_in_common_with_the_start_has_no_judged_cell() -> None:
    report = build_report([Trial("default", "d", "s", result()[0]), Trial("empty", "d", "s", result()[0])], "default",
                          POLICY)
    assert report.verdicts[1].detail == "no judged cell to compare" and report.best is None
