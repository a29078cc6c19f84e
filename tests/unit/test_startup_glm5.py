"""The GLM-5 recipes of 8x-turin promise what SGLang 0.5.10.post1 logs for their command.

The line is tests/fixtures/startup/sglang-0.5.10.post1-glm5-args.log: the ``server_args=`` form of that release
(field names and order of its ServerArgs) with the values its ``__post_init__`` leaves for the published command
(the fixture's header cites each line of the release's source). The published flags ask for 6 draft tokens and
bf16 KV; the engine logs 5 (steps + 1, topk 1) and bfloat16 (an NSA model), so the declarations say those.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rigforge.profile.loader import load_profile
from rigforge.recipes.startup import startup_mismatches, startup_report

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "startup" / "sglang-0.5.10.post1-glm5-args.log"
LINES = [line for line in LOG.read_text().splitlines() if line and not line.startswith("#")]


def test_the_line_reads_as_the_engine_runs_it() -> None:
    report = startup_report("sglang", LINES)
    assert report["speculative"] == ["EAGLE:5"]
    assert report["kv_cache_dtype"] == ["bfloat16"]
    assert (report["moe_backend"], report["custom_all_reduce"]) == (["cutlass"], ["off"])


def test_glm5_cutlass_promises_exactly_that() -> None:
    profile = load_profile("8x-turin")
    assert startup_mismatches("sglang", profile.engine.recipes["glm5-cutlass"].startup, LINES) == []


@pytest.mark.parametrize("recipe", ["glm5-b12x", "glm5-cutlass"])
def test_the_published_flags_are_not_what_is_declared(recipe: str) -> None:
    # The command asks for 6 draft tokens and bf16; SGLang rewrites both before it logs: the declaration is
    # the logged form, so a start of the published command is not disqualified as "runs EAGLE:5, not EAGLE:6".
    profile = load_profile("8x-turin").with_recipe(recipe)
    flags = profile.engine.flags
    assert (flags["--speculative-num-draft-tokens"], flags["--speculative-num-steps"]) == (6, 4)
    assert flags["--speculative-eagle-topk"] == 1 and flags["--kv-cache-dtype"] == "bf16"
    startup = profile.engine.recipes[recipe].startup
    assert (startup["speculative"], startup["kv_cache_dtype"]) == ("EAGLE:5", "bfloat16")


def test_the_b12x_recipe_differs_from_this_line_only_in_its_moe_backend() -> None:
    promised = load_profile("8x-turin").engine.recipes["glm5-b12x"].startup
    assert startup_mismatches("sglang", promised, LINES) == [
        "runs MoE backend cutlass, not b12x (sglang/srt/entrypoints/engine.py:648 (ServerArgs.moe_runner_backend))"]
