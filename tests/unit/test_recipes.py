"""Engine recipes: how they overlay the profile, bad ones refused before any connection, which one a rig runs,
and the experiment report's verdicts on recorded bench results (tests/fixtures/recipes/, real runs)."""

from __future__ import annotations

import copy
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from rigforge.facts.recipes import parse_recipe_state
from rigforge.profile.loader import ProfileError, load_profile
from rigforge.recipes.choice import DEFAULT, Experiment, RecipeState, choose_recipe, recipe_cells
from rigforge.recipes.report import (
    BETTER,
    DISQUALIFIED,
    NOT_BETTER,
    SAME,
    SLOWER,
    START,
    Trial,
    build_report,
    claims_table,
    report_json,
    report_markdown,
    report_table,
    wrong_output,
)
from rigforge.updates.comparison import RegressionPolicy
from roles.recipes import trial_order

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recipes"


def recorded(recipe: str) -> dict[str, Any]:
    return json.loads((RECORDED / f"result-{recipe}.json").read_text())


# --- overlays ---------------------------------------------------------------------------------------------------

def test_a_recipe_overlays_flags_key_by_key_and_null_removes_one() -> None:
    profile = load_profile("4x-threadripper", {"engine": {"recipes": {"wiki": {"flags": {
        "--max-num-seqs": 64, "--enable-chunked-prefill": None}}}}})
    base, recipe = profile.engine.flags, profile.with_recipe("wiki").engine.flags
    assert recipe["--max-num-seqs"] == 64 and "--enable-chunked-prefill" not in recipe
    assert {k: v for k, v in base.items() if k not in ("--max-num-seqs", "--enable-chunked-prefill")}.items() \
        <= recipe.items()


def test_replace_starts_a_mapping_empty_and_a_published_image_drops_the_build() -> None:
    profile = load_profile("4x-threadripper").with_recipe("k64-published")
    assert profile.engine.build is None and profile.engine.image == "verdictai/vllm-blackwell-k64:latest"
    assert "--max-num-seqs" not in profile.engine.flags  # the wiki's, not the K64 post's
    assert profile.engine.env == {"NCCL_P2P_DISABLE": "1", "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    assert profile.engine.docker is not None and profile.engine.docker.shm_size == "32g"
    assert profile.engine.docker.ipc == "host"  # the rest of docker is the profile's
    assert profile.model.repo_id == "Sehyo/Qwen3.5-397B-A17B-NVFP4"
    assert profile.model.revision == "main" and profile.model.allow_patterns  # the rest of model too


def test_another_engine_keeps_the_build_stack_but_not_the_flags() -> None:
    profile = load_profile("2x-pix").with_recipe("vllm-mtp1")
    assert profile.engine.kind == "vllm" and profile.engine.command[-1] == "vllm.entrypoints.openai.api_server"
    assert profile.engine.build is not None and profile.engine.build.dockerfile == "vllm"
    assert "B12X_VERSION" not in profile.engine.build.args  # removed with null
    assert profile.engine.build.args["TORCH_PIN"] == "torch==2.11.0"  # the stack's, inherited
    assert "--moe-runner-backend" not in profile.engine.flags and "SGLANG_ENABLE_SPEC_V2" not in profile.engine.env


def test_each_recipe_is_checkpoint_aware_and_recorded_in_the_profile_it_makes() -> None:
    profile = load_profile("4x-threadripper")
    paths = {name: profile.with_recipe(name).model.path for name in profile.recipe_names}
    assert len(set(paths.values())) == 3  # three checkpoints of one model, side by side
    assert all(profile.with_recipe(name).engine.recipe == name for name in profile.recipe_names)
    assert profile.recipe_names[0] == profile.engine.recipe == "wiki"


# --- bad recipes: one line naming the file and field, before any connection -------------------------------------

BAD = [
    ({"engine": {"recipe": "fastest"}}, "host data 'profile_overrides': engine.recipe:",
     "not one of engine.recipes (wiki, wiki-k64"),
    ({"engine": {"recipes": {"wiki": {"boot": {"kernel_params": []}}}}}, "engine.recipes.wiki.boot:",
     "unknown setting; allowed here: build, claims, command"),
    ({"engine": {"recipes": {"wiki": {"nccl": {"env": {}}}}}}, "engine.recipes.wiki.nccl:", "unknown setting"),
    ({"engine": {"recipes": {"marlin": {"flags": {"--tp": 2}}}}}, "engine.recipes.marlin:",
     "--tensor-parallel-size and --tp in engine.flags name the same option"),
    ({"engine": {"recipes": {"wiki": {"flags": {"--max-num-seq": 64}}}}}, "engine.recipes.wiki:",
     "name the same option (the engine keeps the last one given)"),
    ({"engine": {"recipes": {"marlin": {"model": {"path": "relative"}}}}}, "engine.recipes.marlin.model.path:",
     "should match pattern"),
    ({"engine": {"recipes": {"wiki": {"flags": {"--model": "/x"}}}}}, "engine.recipes.wiki",
     "must not set --model"),
    ({"engine": {"recipes": {"wiki": {"docker": {"shm_size": "8 GB"}}}}}, "engine.recipes.wiki.docker.shm_size:",
     "should match pattern"),
]


@pytest.mark.parametrize(("overrides", "where", "words"), BAD, ids=[case[1] for case in BAD])
def test_a_bad_recipe_is_refused_naming_the_field(overrides: dict, where: str, words: str) -> None:
    with pytest.raises(ProfileError) as caught:
        load_profile("4x-threadripper", overrides)
    first = str(caught.value).split(" (+", 1)[0]
    assert where in first and words in first, first


def test_a_flag_given_twice_in_yaml_is_refused_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "rig.yaml").write_text((Path("inventory/profiles/sandbox.yaml")).read_text().replace(
        "flags: {--rope-freq-base: 10}", "flags: {--rope-freq-base: 10, --rope-freq-base: 20}"))
    for name in ("base.yaml",):
        (tmp_path / name).write_text((Path("inventory/profiles") / name).read_text())
    with pytest.raises(ProfileError, match=r"rig.yaml: invalid YAML: line \d+: duplicate key '--rope-freq-base'"):
        load_profile("rig", profiles_dir=tmp_path)


# --- which recipe a rig runs ------------------------------------------------------------------------------------

def test_the_switch_the_record_and_the_default() -> None:
    profile = load_profile("sandbox")
    nothing = RecipeState()
    assert choose_recipe(profile, None, nothing).name == "default"
    assert choose_recipe(profile, None, nothing).chosen_by == DEFAULT
    switched = choose_recipe(profile, "one-slot", RecipeState("default", DEFAULT))
    assert (switched.name, switched.chosen_by, switched.switches) == ("one-slot", "--data recipe=one-slot", True)
    kept = choose_recipe(profile, None, RecipeState("one-slot", "--data recipe=one-slot"))
    assert (kept.name, kept.chosen_by, kept.switches) == ("one-slot", "--data recipe=one-slot", False)
    gone = choose_recipe(profile, None, RecipeState("renamed-since", "--data recipe=renamed-since"))
    assert gone.name == "default" and gone.switches
    with pytest.raises(ProfileError, match=r"--data recipe=fast: no such recipe in profile sandbox; "
                                           r"engine.recipes: default, one-thread, one-slot"):
        choose_recipe(profile, "fast", nothing)


def test_the_table_row_says_what_happens_to_the_recipe() -> None:
    profile = load_profile("sandbox")
    kept = choose_recipe(profile, None, state := RecipeState("one-slot", "--data recipe=one-slot"))
    assert recipe_cells(kept, state) == ("one-slot (--data recipe=one-slot)", "keep one-slot",
                                         "the rig's record; the profile's default is default (--data recipe=default "
                                         "moves it there)")
    cut = RecipeState("default", DEFAULT, Experiment("20261125T101500Z", "default", "rope-broken"))
    assert recipe_cells(choose_recipe(profile, None, cut), cut)[1:] == (
        "put default back", "a cut experiment leaves the rig on its starting recipe")


def test_the_rigs_records_are_parsed_from_the_fact_output() -> None:
    record = json.dumps({"_managed_by": "x", "recipe": {"name": "one-slot", "chosen_by": "--data recipe=one-slot"}})
    experiment = json.dumps({"stamp": "20261125T101500Z", "starting": "default", "trying": "no-start"})
    state = parse_recipe_state(f"## profile\n{record}\n## experiment\n{experiment}\n")
    assert state == RecipeState("one-slot", "--data recipe=one-slot",
                                Experiment("20261125T101500Z", "default", "no-start"))
    assert parse_recipe_state("## profile\n\n## experiment\n") == RecipeState()
    assert parse_recipe_state("## profile\n{not json\n## experiment\n").recorded is None


def test_the_trial_order_starts_with_the_starting_recipe() -> None:
    profile = load_profile("sandbox")
    assert trial_order(profile, "one-slot", []) == ["one-slot", "default", "one-thread", "kv-q4", "rope-broken",
                                                      "no-start"]
    assert trial_order(profile, "default", ["one-thread", "default"]) == ["default", "one-thread"]
    with pytest.raises(ProfileError, match="--data recipes=fast: no recipe 'fast' in profile sandbox"):
        trial_order(profile, "default", ["fast"])


# --- the report's verdicts, on recorded bench results ------------------------------------------------------------

POLICY = RegressionPolicy.from_profile(load_profile("sandbox"))


def trial(recipe: str, result: dict[str, Any] | None = None, disqualified: str = "",
          later: tuple[dict[str, Any], ...] = ()) -> Trial:
    """A trial of ``recipe`` (``later``: its later engine starts); one the sandbox profile no longer has (the
    recorded small-batch) has no claims."""
    declared = load_profile("sandbox").engine.recipes.get(recipe)
    claims = tuple(claim.model_dump(mode="json") for claim in declared.claims) if declared else ()
    return Trial(recipe, f"{recipe} (description)", "a source", result, f"results/x/{recipe}", disqualified, claims,
                 later=later)


def started(recipe: str, result: dict[str, Any]) -> Trial:
    """``recipe`` measured in three engine starts: the result, and copies 0.5 % faster and slower (labelled: a
    start-to-start spread made for the test, as a quiet rig's)."""
    return trial(recipe, result, later=(scaled(result, 1.005), scaled(result, 0.995)))


def scaled(result: dict[str, Any], factor: float) -> dict[str, Any]:
    """Every decode and output number of every repeat multiplied by ``factor``, every latency divided by it (a start
    that runs faster is faster everywhere: since issue 49 a judged latency row whose starts are identical is
    unjudgeable and makes the comparison cannot tell)."""
    copied = copy.deepcopy(result)
    for cell in copied["cells"]:
        for block in {id(block): block for block in [*cell["repeats"], cell["metrics"]] if block}.values():
            block["decode_tps_per_user"]["median"] *= factor
            block["output_throughput"] *= factor
            for latency in ("ttft_ms", "itl_ms"):
                for stat, value in (block.get(latency) or {}).items():
                    if isinstance(value, (int, float)):
                        block[latency][stat] = value / factor
    return copied


def steady(result: dict[str, Any], spread: float = 0.01) -> dict[str, Any]:
    """The recorded result with each cell's repeats pulled to its median ± ``spread`` (the recorded run's C=1
    repeats spread 45 % on a loaded box, where no verdict can be claimed): a GPU-quiet copy, labelled as one."""
    copied = copy.deepcopy(result)
    for cell in copied["cells"]:
        for name, read in (("decode_tps_per_user", lambda b: b["decode_tps_per_user"]["median"]),
                           ("output_throughput", lambda b: b["output_throughput"])):
            values = [read(block) for block in cell["repeats"]]
            middle = statistics.median(values)
            for index, block in enumerate(cell["repeats"]):
                value = middle * (1 + spread * (1 if index % 2 else -1))
                if name == "output_throughput":
                    block[name] = value
                else:
                    block[name]["median"] = value
    return copied


def test_verdicts_on_recorded_results() -> None:
    default = steady(recorded("default"), spread=0.002)  # two repeats at ±1 % leave "same" a cannot tell
    report = build_report([
        started("default", default),
        started("one-thread", scaled(default, 0.5)),           # slower in every start: a regression
        started("one-slot", scaled(default, 2.0)),             # twice as fast on the primary: better
        started("same", default),                              # the same numbers: same
        trial("rope-broken", recorded("rope-broken"), "wrong output: probe_capital: ' A: A: A: A:'"),
        trial("no-start", None, "did not come up: known failure llama-flag-out-of-range (fail): …"),
    ], "default", POLICY)
    verdicts = {verdict.recipe: verdict.verdict for verdict in report.verdicts}
    assert verdicts == {"default": START, "one-thread": SLOWER, "one-slot": BETTER, "same": SAME,
                        "rope-broken": DISQUALIFIED, "no-start": DISQUALIFIED}
    assert report.best == "one-slot"
    assert report.passed == ("default", "one-thread", "one-slot", "same")


def test_a_gain_no_larger_than_the_starts_own_spread_is_not_better() -> None:
    default = steady(recorded("default"))
    # The start's three engine starts ran at 1.0, 1.3 and 1.15 times its speed: one-slot's +30 % is inside that.
    start = trial("default", default, later=(scaled(default, 1.3), scaled(default, 1.15)))
    report = build_report([start, started("one-slot", scaled(default, 1.3))], "default", POLICY)
    verdict = report.verdicts[1]
    assert verdict.verdict == NOT_BETTER and "3 vs 3 starts" in verdict.detail, verdict
    assert report.best is None


def test_a_machine_that_sped_up_mid_run_allows_no_claim() -> None:
    """A real tournament (tests/fixtures/recipes/result-drift-*.json): the machine sped up 6x mid-run, so the slower
    one-thread, measured after the speed-up, read +834 %; the start's two starts (before and after the speed-up)
    show a spread no verdict can clear."""
    start = trial("default", recorded("drift-default"), later=(recorded("drift-default-again"),))
    one_thread = started("one-thread", recorded("drift-one-thread"))
    verdict = build_report([start, one_thread], "default", POLICY).verdicts[1]
    assert verdict.verdict == NOT_BETTER and "2 vs 3 starts" in verdict.detail, verdict


def test_the_real_noisy_runs_claim_nothing_they_cannot_support() -> None:
    """The recorded runs (tests/fixtures/recipes/, a loaded 2-core box): the start's C=1 repeats are 53.6 and
    34.1 tok/s, so no recipe is better there, whatever its median."""
    default, one_thread, small_batch = recorded("default"), recorded("one-thread"), recorded("small-batch")
    report = build_report([trial("default", default), trial("one-thread", one_thread),
                           trial("small-batch", small_batch)], "default", POLICY)
    assert not any(verdict.verdict == BETTER for verdict in report.verdicts)
    alone = build_report([trial("default", default), trial("one-slot", default)], "default", POLICY)
    assert alone.verdicts[1].verdict in (SAME, NOT_BETTER) and alone.best is None
    assert "Best: none judged better than default" in report_markdown(alone, "h", "s")


def test_the_table_claims_and_json_name_every_recipe() -> None:
    default = recorded("default")
    report = build_report([trial("default", default), trial("rope-broken", None, "wrong output: probe_capital: x"),
                           trial("no-start", None, "did not come up: known failure llama-flag-out-of-range (fail): "
                                                   "the value; fix: set it (journal: OverflowError)")],
                          "default", POLICY)
    table = report_table(report)
    assert table[0] == "| recipe | C=1 in=128 | C=2 in=128 | verdict against default |"
    assert table[4].endswith("| disqualified: did not come up: known failure llama-flag-out-of-range (fail): "
                             "the value |")
    claims = claims_table(report)
    assert claims[2].startswith("| default | 85 decode tok/s (C=1) | greedy decode of one request")
    data = report_json(report, "host", "stamp")
    assert [entry["recipe"] for entry in data["recipes"]] == ["default", "rope-broken", "no-start"]
    assert data["recipes"][2]["disqualified"].endswith("(journal: OverflowError)")


def test_wrong_output_names_the_probe() -> None:
    assert wrong_output(recorded("rope-broken")).startswith(
        "wrong output: probe_capital: 'Q: What is the capital of France?\\nA:' -> ' A: A: A:")
    assert wrong_output(recorded("default")) == ""


def test_the_report_names_each_recipes_image_and_its_commits() -> None:
    refs = {"VLLM_REF": {"repository": "https://github.com/vllm-project/vllm.git", "ref": "v0.19.1",
                         "commit": "1" * 40}}
    built = Trial("wiki", "d", "s", recorded("default"), "results/x/wiki", image="rigforge/vllm:9a42174d356c1803",
                  image_git_refs=refs)
    native = trial("default", recorded("default"))
    report = build_report([native, built], "default", POLICY)
    markdown = report_markdown(report, "h", "s")
    assert f"- **wiki**: rigforge/vllm:9a42174d356c1803 (VLLM_REF v0.19.1 = {'1' * 40})" in markdown
    assert "- **default**: no image (a native engine, or it never got one)" in markdown
    data = report_json(report, "h", "s")["recipes"][1]
    assert (data["image"], data["image_git_refs"]) == ("rigforge/vllm:9a42174d356c1803", refs)
