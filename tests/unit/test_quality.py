"""The quality pass: each engine's logprob answer read (llama.cpp captured here; vLLM and SGLang as quoted in public
issues), a pass compared with the reference (real llama.cpp passes: another KV cache size, the K cache at q4_0), a
tokenizer mismatch refused, and quality vetoing a faster recipe (tests/fixtures/quality/README.md)."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rigforge.bench.config import ConfigError, config_from_dict
from rigforge.bench.logprob_formats import FormatError, llama_generated_steps, sglang_prompt_steps, vllm_prompt_steps
from rigforge.bench.quality import Step, greedy_steps
from rigforge.profile.loader import load_profile
from rigforge.quality.judge import DIFFER, SAME_ANSWERS, UNKNOWN, judge_quality
from rigforge.quality.kld import compare_passes, position_kld
from rigforge.quality.over_starts import judge_over_starts
from rigforge.quality.reference import load_corpus, quality_config
from rigforge.quality.tasks import TaskSetMissing, grade, task_block
from rigforge.recipes.quality_veto import ANSWERS_DIFFER, veto
from rigforge.recipes.report import RecipeVerdict, Trial, build_report
from rigforge.updates.verdict import BETTER, CANNOT_TELL, SAME
from tests.unit.test_promises_recipe_report import CHAT, POLICY, START_RESULT, measured, side_trial

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "quality"
TOLERANCE = load_profile("sandbox").bench.quality.max_mean_kld


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def test_llamacpp_generated_tokens_are_read_with_their_ids_and_top_k() -> None:
    steps = llama_generated_steps(fixture("llamacpp_completion_logprobs.json"), top_k=4)
    assert [step.token for step in steps] == [573, 1304, 563, 496, 3875, 529]  # " for she is a woman of"
    assert steps[0].text == " for" and all(len(step.top) == 4 for step in steps)
    assert all(step.top[0][0] == step.token for step in steps)  # greedy: the chosen token is the most likely
    assert all(step.top[0][1] >= step.top[-1][1] for step in steps)


def test_llamacpp_answer_without_logprobs_is_a_format_error() -> None:
    answer = fixture("llamacpp_completion_logprobs.json")
    del answer["choices"][0]["logprobs"]
    with pytest.raises(FormatError, match="logprobs"):
        llama_generated_steps(answer, 4)


def test_vllm_prompt_logprobs_partial_top_k_keeps_only_ranks_within_k() -> None:
    quoted = fixture("vllm_prompt_logprobs.json")
    steps = vllm_prompt_steps(quoted["response"], quoted["prompt_ids"], top_k=8)
    assert [step.token for step in steps] == quoted["prompt_ids"][1:]
    assert steps[0].token_logprob == pytest.approx(-4.1353, abs=1e-4) and steps[0].text == "Answer"
    # Only the prompt's own token is listed: within k it is the whole (partial) top-k, past k (rank 9, 738) none.
    assert [len(step.top) for step in steps] == [1, 1, 0, 0, 1]
    with pytest.raises(FormatError, match="6 entries for 7 prompt tokens"):
        vllm_prompt_steps(quoted["response"], quoted["prompt_ids"][:-1] + [1, 2], 8)


def test_sglang_input_logprobs_give_the_prompt_ids_and_each_positions_top_k() -> None:
    ids, steps = sglang_prompt_steps(fixture("sglang_input_logprobs.json")["response"], top_k=3)
    assert ids == [6722, 315, 9625, 374]
    assert [step.token for step in steps] == [315, 9625, 374]
    assert steps[1].top == [[279, -1.0390625], [9625, -3.53125], [5616, -3.96875]]  # forced token ranked 2nd
    assert steps[1].token_logprob == -3.53125
    with pytest.raises(FormatError, match="return_logprob"):
        sglang_prompt_steps({"meta_info": {}}, 3)


def test_another_kv_cache_size_stays_inside_the_tolerance_kv_q4_is_past_it() -> None:
    reference = fixture("llamacpp_pass_default.json")
    again = compare_passes(reference, fixture("llamacpp_pass_default_restart.json"))
    quantized = compare_passes(reference, fixture("llamacpp_pass_kv_q4.json"))
    assert again.refused is None and quantized.refused is None and again.positions == quantized.positions == 64
    assert again.mean_kld < TOLERANCE / 2 < TOLERANCE < quantized.mean_kld
    assert quantized.same_top_percent < again.same_top_percent
    assert quantized.p99_kld > again.p99_kld
    assert quantized.first_divergence and quantized.first_divergence.startswith("eccl-1 token ")
    assert compare_passes(reference, reference).mean_kld == 0.0


def test_a_position_without_top_k_is_skipped_and_said() -> None:
    reference = fixture("llamacpp_pass_default.json")
    partial = copy.deepcopy(reference)
    partial["texts"][0]["steps"][3]["top"] = []
    measured_pass = compare_passes(reference, partial)
    assert measured_pass.positions == 63 and "eccl-1 token 3: no top-k listed" in measured_pass.skipped


def test_a_tokenizer_mismatch_is_refused_with_the_reason() -> None:
    reference = fixture("llamacpp_pass_default.json")
    other = copy.deepcopy(reference)
    other["texts"][1]["prompt_ids"][5] += 1
    refused = compare_passes(reference, other)
    assert refused.mean_kld is None
    assert refused.refused and refused.refused.startswith("text prov-6: the candidate's tokenizer gives other token "
                                                          "ids (first at token 5")
    assert "KLD needs the same vocabulary" in refused.refused
    method = compare_passes(reference, {**reference, "method": "forced"})
    assert method.refused and "method" in method.refused


def test_position_kld_is_zero_for_equal_and_grows_when_mass_moves() -> None:
    same = [[1, math.log(0.7)], [2, math.log(0.2)]]
    assert position_kld(same, same) == pytest.approx(0.0, abs=1e-12)
    moved = [[2, math.log(0.7)], [1, math.log(0.2)]]
    assert position_kld(same, moved) > 0.5
    assert position_kld(same, []) is None


def test_greedy_stays_on_the_references_path_and_bounds_its_restarts() -> None:
    calls: list[list[int]] = []

    def always_other(ids: list[int], count: int) -> list[Step]:
        calls.append(ids)
        return [Step(99)] * count  # never the reference's token

    steps, resyncs, requests = greedy_steps(always_other, [2], [5, 6, 7, 8], 4, max_resyncs=2)
    assert resyncs == [0, 1, 2] and requests == 3 and len(steps) == 3  # then the rest is left unmeasured
    assert calls == [[2], [2, 5], [2, 5, 6]]  # each restart from the prompt plus the reference's tokens


def test_the_bench_config_refuses_a_bad_quality_block_by_field() -> None:
    good = quality_config(load_profile("sandbox").bench.quality, "llama.cpp", None)
    first = [text["id"] for text in load_corpus()["texts"][:load_profile("sandbox").bench.quality.texts]]
    assert good and good["method"] == "greedy" and [text["id"] for text in good["texts"]] == first
    config_from_dict({"base_url": "http://127.0.0.1:8080", "model": "m", "quality": good})
    for bad, field in (({**good, "top_k": 0}, "quality.top_k"), ({**good, "method": "forced"}, "quality.engine"),
                       ({**good, "texts": []}, "quality.texts")):
        with pytest.raises(ConfigError, match=field):
            config_from_dict({"base_url": "http://127.0.0.1:8080", "model": "m", "quality": bad})
    with pytest.raises(ConfigError, match="quality_only"):
        config_from_dict({"base_url": "http://127.0.0.1:8080", "model": "m", "quality_only": True})


def against(mean: float, noise: float | None = 0.0007) -> dict[str, Any]:
    return {"quality": {"against_reference": {
        "mean_kld": mean, "p99_kld": mean * 5, "same_top_percent": 90.0, "positions": 128, "refused": None,
        "first_divergence": "eccl-1 token 1: reference id 1, candidate id 2", "tolerance": TOLERANCE,
        "noise": None if noise is None else {"mean_kld": noise}}}}


def test_the_judgement_needs_both_the_tolerance_and_the_noise_cleared() -> None:
    assert judge_quality(against(0.002)["quality"]).state == SAME_ANSWERS
    assert judge_quality(against(0.043)["quality"]).state == DIFFER
    noisy = against(0.043)
    noisy["quality"]["against_reference"]["noise"] = {"mean_kld": 0.03, "interval": [0.02, 0.05]}
    assert judge_quality(noisy["quality"]).state == UNKNOWN  # not clear of the top of the A/A's interval
    assert judge_quality(against(0.043, noise=None)["quality"]).state == UNKNOWN
    assert judge_quality({"against_reference": {"refused": "text a: another tokenizer"}}).line == (
        "quality cannot tell: text a: another tokenizer")


def quality_trial(name: str, speed: float, mean_kld: float) -> Trial:
    """A recipe measured in three engine starts at ``speed`` times the start, each start's pass at ``mean_kld``."""
    return side_trial(name, [{**start, **against(mean_kld)} for start in measured(speed, 1.0, CHAT)])


def test_a_faster_recipe_whose_answers_differ_is_never_better_nor_kept() -> None:
    faster = RecipeVerdict("kv-q4", BETTER, "decode C=1 in=128: 30.0 → 39.0 tok/s (+30.0 %)")
    vetoed = veto(faster, judge_over_starts([against(0.043)]))
    assert vetoed.verdict == ANSWERS_DIFFER
    assert vetoed.detail.startswith("faster, answers differ in its one start (mean KLD 0.0430")
    unmeasured = veto(faster, judge_over_starts([{"quality": {"against_reference": {"refused": "no reference"}}}]))
    assert unmeasured.verdict == CANNOT_TELL and unmeasured.detail.startswith("faster, but quality cannot tell")
    assert veto(faster, judge_over_starts([{}])).verdict == BETTER  # a profile without the pass: speed alone
    assert veto(replace(faster, verdict=SAME), judge_over_starts([against(0.002)])).verdict == SAME
    trials = [quality_trial("default", 1.0, 0.0), quality_trial("kv-q4", 1.5, 0.043),
              quality_trial("fast", 1.1, 0.001)]
    report = build_report(trials, "default", POLICY)
    assert {verdict.recipe: verdict.verdict for verdict in report.verdicts} == {
        "default": "start", "kv-q4": ANSWERS_DIFFER, "fast": BETTER}
    assert report.best == "fast"


def test_the_task_score_grades_the_final_number_and_is_refused_where_the_set_is_missing(tmp_path: Path) -> None:
    score = grade(["72", "1000"], ["48 + 24 = 72 clips.\n#### 72", "The answer is 999."])
    assert (score.correct, score.total, score.percent) == (1, 2, 50.0)
    assert score.interval[0] < 50.0 < score.interval[1]
    quality = load_profile("sandbox").bench.quality
    switched = quality.model_copy(update={"task_score": quality.task_score.model_copy(update={"enabled": True})})
    assert quality_config(switched, "llama.cpp", None)["task_score"]["questions"]
    with pytest.raises(TaskSetMissing, match="bench.quality.task_score.enabled: no graded set"):
        task_block(switched.task_score, tmp_path / "missing.jsonl")


def test_a_driver_update_whose_answers_moved_is_a_regression(tmp_path: Path) -> None:
    from rigforge.updates.record import UpdateRecord
    from roles.quality import quality_regression

    runs = {}
    for name, mean in (("before", 0.0007), ("after", 0.043), ("steady", 0.002)):
        (tmp_path / "rig" / name).mkdir(parents=True)
        (tmp_path / "rig" / name / "result.json").write_text(json.dumps(against(mean)))
        runs[name] = str(tmp_path / "rig" / name)
    record = UpdateRecord("rig", "20261127T0500Z", False, "595.1", "595.2", runs["before"], runs["after"], 30.0, 31.0,
                          SAME, "same: decode C=1 in=128 …")
    judged = quality_regression(tmp_path, record)
    assert judged.regressed and judged.summary.startswith("answers differ in its one start (mean KLD 0.0430")
    assert json.loads((tmp_path / "rig" / "updates" / "20261127T0500Z.json").read_text())["verdict"] == judged.verdict
    assert quality_regression(tmp_path, replace(record, after=runs["steady"])).verdict == SAME
    # k starts a side: one after-start of three past the tolerance is not a regression, all three are
    starts = replace(record, baselines=[runs["before"]] * 3, afters=[runs["after"], runs["steady"], runs["steady"]])
    assert quality_regression(tmp_path, starts).verdict == SAME
    moved = quality_regression(tmp_path, replace(starts, afters=[runs["after"]] * 3))
    assert moved.regressed and moved.summary.startswith("answers differ in all 3 starts")


def test_the_trade_off_chart_plots_speed_against_kld_for_each_measured_recipe(tmp_path: Path) -> None:
    from rigforge.recipes.quality_plot import primary_of, render_quality_plot
    from rigforge.recipes.report import Trial

    trials = [quality_trial("default", 1.0, 0.0), quality_trial("kv-q4", 1.2, 0.043)]
    report = build_report(trials, "default", POLICY)
    assert primary_of(report) is not None and primary_of(report)[0] == "decode_tps_per_user"
    png = render_quality_plot(report, tmp_path / "quality.png", "rig")
    assert png is not None and png.stat().st_size > 10_000
    assert render_quality_plot(build_report(trials[:1], "default", POLICY), tmp_path / "none.png", "rig") is not None
    bare = [Trial("default", "d", "s", START_RESULT, "r/1")]
    assert render_quality_plot(build_report(bare, "default", POLICY), tmp_path / "bare.png", "rig") is None
