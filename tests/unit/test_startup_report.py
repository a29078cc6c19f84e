"""What an engine reports at start, read from real start-up lines, against what a recipe promises.

Real parts: the fixtures under tests/fixtures/startup/ are start-up lines of vLLM and SGLang as quoted in public
issues (each file names its issue); the readers are the log lines of the releases the recipes pin
(rigforge/recipes/startup.py cites file and line). No fixture is a run of a recipe on its own rig (no such log is
public): each recipe's promises are checked against the real lines of its engine, which either match or are
reported as "runs X, not Y" / "did not report". llama.cpp's lines are checked end to end on the sandbox
(tests/e2e/test_recipes_on_hosts.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rigforge.profile.loader import load_profile
from rigforge.recipes.startup import READERS, STARTUP_RECORD, startup_mismatches, startup_needles, startup_report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "startup"


def lines(name: str) -> list[str]:
    """The fixture's log lines (its header comments, which cite where it comes from, left out)."""
    return [line for line in (FIXTURES / name).read_text().splitlines() if line and not line.startswith("#")]


def test_vllm_lines_that_match_what_was_asked() -> None:
    # vllm issue 31085: FlashInfer's b12x MoE and FlashAttention, as the reporter asked for.
    assert startup_mismatches("vllm", {"moe_backend": "FLASHINFER_B12X", "attention_backend": "FLASH_ATTN"},
                              lines("vllm-issue-31085-b12x.log")) == []
    # vllm issue 49011: the engine config line: MTP with 2 tokens, TP=1, compressed-tensors, nvfp4 KV.
    report = startup_report("vllm", lines("vllm-issue-49011-config.log"))
    assert report == {"speculative": ["mtp:2"], "tensor_parallel_size": ["1"], "pipeline_parallel_size": ["1"],
                      "custom_all_reduce": ["on"], "quantization": ["compressed-tensors"],
                      "kv_cache_dtype": ["nvfp4"]}


def test_a_vllm_fallback_is_reported_as_what_it_runs() -> None:
    # vllm issue 40153: asked for FlashInfer attention, vLLM fell back to Triton.
    assert startup_mismatches("vllm", {"attention_backend": "FLASHINFER"}, lines("vllm-issue-40153-fallback.log")) == [
        "runs attention backend TRITON_ATTN, not FLASHINFER (vllm/platforms/cuda.py:274, 335)"]


def test_an_attention_backend_selected_by_flag_is_read() -> None:
    # vLLM 0.19.1 vllm/platforms/cuda.py:274 logs the backend --attention-backend selected ("Using %s backend."
    # with the AttentionBackendEnum member), as the 2x vllm-mtp1 recipe selects TRITON_ATTN. The line below is that
    # log line as a public vLLM server log of 2026-04-19 shows it (its release had it at cuda.py:308).
    selected = "(EngineCore pid=196) INFO 04-19 11:05:22 [cuda.py:308] Using AttentionBackendEnum.TRITON_ATTN backend."
    promised = load_profile("2x-pix").engine.recipes["vllm-mtp1"].startup
    assert startup_report("vllm", [selected]) == {"attention_backend": ["TRITON_ATTN"]}
    assert "runs attention backend" not in " ".join(startup_mismatches("vllm", promised, [selected]))


def test_marlin_on_an_engine_that_chose_another_moe_backend() -> None:
    """The 4x marlin recipe's promise against a real engine that chose FlashInfer's b12x MoE."""
    promised = load_profile("4x-threadripper").engine.recipes["marlin"].startup
    problems = startup_mismatches("vllm", promised, lines("vllm-issue-31085-b12x.log"))
    assert problems[0] == ("runs MoE backend FLASHINFER_B12X, not MARLIN "
                           "(vllm/model_executor/layers/fused_moe/oracle/nvfp4.py:189, 226, 256)")
    assert "did not report its TP size (expected 4; vllm/v1/engine/core.py:106 with vllm/config/vllm.py:1684 logs it)" \
        in problems


def test_the_wiki_recipe_against_another_checkpoint_and_tp() -> None:
    promised = load_profile("4x-threadripper").engine.recipes["wiki"].startup
    assert startup_mismatches("vllm", promised, lines("vllm-issue-49011-config.log")) == [
        "runs quantisation compressed-tensors, not modelopt_fp4 (vllm/v1/engine/core.py:106 with "
        "vllm/config/vllm.py:1690)",
        "runs TP size 1, not 4 (vllm/v1/engine/core.py:106 with vllm/config/vllm.py:1684)"]


def test_sglang_args_that_chose_nothing_of_what_b12x_nextn_asks() -> None:
    promised = load_profile("2x-pix").engine.recipes["b12x-nextn"].startup
    problems = startup_mismatches("sglang", promised, lines("sglang-issue-11267-args.log"))
    assert problems[:3] == [
        "runs MoE backend auto, not b12x (sglang/srt/entrypoints/engine.py:648 (ServerArgs.moe_runner_backend))",
        "runs attention backend none, not flashinfer (sglang/srt/entrypoints/engine.py:648 "
        "(ServerArgs.attention_backend))",
        "did not report its quantisation (expected modelopt_fp4; sglang/srt/entrypoints/engine.py:648 "
        "(ServerArgs.quantization) logs it)"]
    assert any(problem.startswith("runs speculative decoding none, not EAGLE:6") for problem in problems)


def test_sglang_args_that_match() -> None:
    assert startup_mismatches("sglang", {"moe_backend": "auto", "speculative": "none"},
                              lines("sglang-issue-11267-args.log")) == []


def test_a_worker_that_fell_back_beside_the_others_is_named() -> None:
    one = "(Worker_TP{}) INFO [nvfp4.py:226] Using '{}' NvFp4 MoE backend out of potential backends: ['MARLIN']."
    mixed = [one.format(0, "MARLIN"), one.format(1, "VLLM_CUTLASS")]
    assert startup_mismatches("vllm", {"moe_backend": "MARLIN"}, mixed) == [
        "runs MoE backend VLLM_CUTLASS, not MARLIN (vllm/model_executor/layers/fused_moe/oracle/nvfp4.py:189, 226, "
        "256)"]


def test_vllm_turning_custom_all_reduce_off_itself_is_off() -> None:
    config = [line for line in lines("vllm-issue-49011-config.log")]
    # vllm/distributed/device_communicators/custom_all_reduce.py:155 of 0.19.1, as it logs it on >2 PCIe GPUs.
    off = "WARNING [custom_all_reduce.py:154] Custom allreduce is disabled because it's not supported on more than two"
    assert startup_report("vllm", [*config, off])["custom_all_reduce"] == ["off"]


@pytest.mark.parametrize("profile_name", ["2x-pix", "4x-threadripper", "8x-turin"])
def test_every_gpu_recipe_promises_what_its_engine_logs(profile_name: str) -> None:
    """Each GPU recipe with a release whose lines were read declares its start-up report in items its engine
    reports; and against every real log of its engine it is either met or named as what the engine ran."""
    profile = load_profile(profile_name)
    for name in profile.engine.recipes:
        recipe = profile.with_recipe(name)
        spec = recipe.engine.recipes[name]
        if spec.engine_release in (None, "vllm==0.33.0"):  # 0.33.0's lines are not read here (the profile says)
            continue
        assert spec.startup, f"{profile_name}:{name} promises nothing its engine reports at start"
        kind = recipe.engine.kind
        assert set(spec.startup) <= set(READERS[kind]), f"{profile_name}:{name}: {kind} does not log those"
        for fixture in FIXTURES.glob(f"{kind}-*.log"):
            for problem in startup_mismatches(kind, spec.startup, lines(fixture.name)):
                assert problem.startswith(("runs ", "did not report its ")), problem


def test_the_needles_are_what_the_health_wait_keeps() -> None:
    assert "NvFp4 MoE backend out of potential backends" in startup_needles("vllm")
    assert "moe_runner_backend=" in startup_needles("sglang")
    assert startup_needles("llama.cpp") == ["n_ctx_slot", "n_slots", "threadpool init, n_threads"]


def test_llama_cpp_lines_of_the_sandbox_launcher() -> None:
    """The sandbox's own llama.cpp start (tests/fixtures/known-failures/README.md says how it was recorded)."""
    start = (FIXTURES.parent / "known-failures" / "llama-healthy-start.txt").read_text().splitlines()
    profile = load_profile("sandbox")
    assert startup_mismatches("llama.cpp", profile.engine.recipes["default"].startup, start) == []
    assert startup_mismatches("llama.cpp", profile.engine.recipes["one-thread"].startup, start) == [
        "runs threads 2, not 1 (llama.cpp common: llama threadpool init)"]


def test_the_health_wait_keeps_the_lines_of_its_engines_kind() -> None:
    from roles.service import render_wait_script

    script = render_wait_script(load_profile("sandbox"))
    assert "grep -F -e n_ctx_slot -e n_slots -e 'threadpool init, n_threads'" in script
    assert f"> {STARTUP_RECORD}.new && mv {STARTUP_RECORD}.new {STARTUP_RECORD}" in script
    vllm = render_wait_script(load_profile("4x-threadripper").with_recipe("marlin"))
    assert "-e 'NvFp4 MoE backend out of potential backends'" in vllm
