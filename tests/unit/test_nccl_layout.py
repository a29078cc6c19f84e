"""The NCCL graph against the engine's parallel layout: a profile whose engine gets the 8-GPU graph with a
communicator smaller than 8 GPUs is refused when it loads, with one line naming the file and the setting.

Why refusing is right: NCCL fails communicator init when the graph names a GPU the communicator lacks
(tests/fixtures/nccl/: one rank given the 8-GPU graph, `XML Import Channel : dev 1 not found.`).
"""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rigforge.operations.nvidia_apt import RepoPlatform
from rigforge.profile import Profile
from rigforge.profile.loader import PROFILES_DIR, ProfileError, load_profile
from rigforge.profile.nccl_layout import Group, check_graph_layout, engine_graph_file, engine_groups, graph_devices
from rigforge.profile.types import FieldError
from roles.host import render_host_files

VARIANT = """\
# 8x-turin serving with half the GPUs per tensor-parallel group (as a TP 4 x DP 2 recipe would).
extends: 8x-turin
engine:
  flags:
    --tensor-parallel-size: 4
"""

#: The refusal, whole: file, field, what the layout makes, what the graph names, what NCCL does, what to change.
TP4_REFUSAL = (
    "8x-turin-tp4.yaml: engine.flags.--tensor-parallel-size: --tensor-parallel-size 4 makes tensor-parallel "
    "groups of 4 GPUs, and the NCCL graph this engine gets (nccl.graph_xml) names 8 GPUs (dev 0-7): NCCL fails "
    "every communicator that lacks one of them at init ('XML Import Channel : dev N not found'); run this layout "
    "without the graph (nccl.graph_xml: false: the engine env file gives it to every recipe of the rig) or make "
    "every group 8 GPUs")


def _refusal(overrides: dict) -> str:
    with pytest.raises(ProfileError) as error:
        load_profile("8x-turin", overrides)
    return str(error.value)


def _vllm(flags: dict) -> dict:
    """8x-turin's rig with a vLLM engine: the SGLang tensor-parallel flag is left out (false), then ``flags``."""
    return {"engine": {"kind": "vllm", "flags": {"--tensor-parallel-size": False, **flags}}}


def test_a_profile_variant_with_tensor_parallel_4_is_refused_with_one_line(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    shutil.copytree(PROFILES_DIR, profiles)
    (profiles / "8x-turin-tp4.yaml").write_text(VARIANT)
    with pytest.raises(ProfileError) as error:
        load_profile("8x-turin-tp4", profiles_dir=profiles)
    line = str(error.value)
    print(line)  # the line the README quotes
    assert "\n" not in line
    assert line.endswith(TP4_REFUSAL) and line.startswith(str(profiles))


def test_the_real_profiles_pass_and_only_8x_turin_gets_a_graph() -> None:
    turin = load_profile("8x-turin")
    assert engine_graph_file(turin) == "/etc/nccl_graph_opt.xml"
    assert engine_groups(turin) == [Group("tensor-parallel", 8, "--tensor-parallel-size", "--tensor-parallel-size 8")]
    for name in ("2x-pix", "4x-threadripper", "sandbox"):
        assert engine_graph_file(load_profile(name)) is None


def test_the_graph_devices_are_the_ones_in_the_rendered_file() -> None:
    files = render_host_files(load_profile("8x-turin"), RepoPlatform("ubuntu2404", "x86_64"))
    devs = {int(gpu.get("dev"), 0) for gpu in ET.fromstring(files["/etc/nccl_graph_opt.xml"]).iter("gpu")}
    assert tuple(sorted(devs)) == graph_devices() == tuple(range(8))


@pytest.mark.parametrize(("overrides", "field", "says"), [
    # rig-facts §5: vLLM DCP=4 on the 8-GPU graph fails at communicator init.
    (_vllm({"--tensor-parallel-size": 8, "--decode-context-parallel-size": 4}),
     "engine.flags.--decode-context-parallel-size", "makes decode-context-parallel groups of 4 GPUs"),
    (_vllm({"--tensor-parallel-size": 4, "--data-parallel-size": 2}),
     "engine.flags.--tensor-parallel-size", "--tensor-parallel-size 4 makes tensor-parallel groups of 4 GPUs"),
    (_vllm({"--tensor-parallel-size": 4, "--pipeline-parallel-size": 2}),
     "engine.flags.--tensor-parallel-size", "tensor-parallel groups of 4 GPUs"),
    (_vllm({"--tensor-parallel-size": 8, "--prefill-context-parallel-size": 2}),
     "engine.flags.--prefill-context-parallel-size", "prefill-context-parallel groups of 2 GPUs"),
    ({"engine": {"flags": {"--dp": 2, "--enable-dp-attention": True}}},
     "engine.flags.--dp", "--dp 2 with --enable-dp-attention on 8 tensor-parallel GPUs makes attention "
                          "tensor-parallel groups of 4 GPUs"),
    ({"engine": {"flags": {"--moe-dp-size": 2}}}, "engine.flags.--moe-dp-size", "MoE data-parallel groups of 2"),
    ({"engine": {"flags": {"--ep-size": 4}}}, "engine.flags.--ep-size", "expert-parallel groups of 4"),
    ({"engine": {"flags": {"--decode-context-parallel-size": 4}}}, "engine.flags.--decode-context-parallel-size",
     "decode-context-parallel groups of 4"),
    ({"gpus": {"count": 4}}, "nccl.graph_xml", "the NCCL graph names 8 GPUs (dev 0-7) and gpus.count is 4"),
    ({"engine": {"docker": {"gpus": "device=0,1,2,3"}}}, "engine.docker.gpus",
     "the container sees device=0,1,2,3 and the NCCL graph names 8 GPUs"),
    ({"nccl": {"env": {"NCCL_GRAPH_FILE": "/etc/nccl_graph_opt.xml"}}}, "nccl.env.NCCL_GRAPH_FILE",
     "NCCL_GRAPH_FILE goes only into the engine's environment, never /etc/nccl.conf"),
    ({"engine": {"env": {"NCCL_GRAPH_FILE": "/opt/graph.xml"}}}, "engine.env.NCCL_GRAPH_FILE",
     "/opt/graph.xml is not the graph rigforge writes, so its GPUs are unknown"),
    # An empty value is no way out: NCCL fails on it too (tests/fixtures/nccl/e-graph-empty.log).
    ({"engine": {"env": {"NCCL_GRAPH_FILE": ""}, "flags": {"--tensor-parallel-size": 4}}},
     "engine.env.NCCL_GRAPH_FILE", "an empty NCCL_GRAPH_FILE fails NCCL init too ('Could not open XML graph file  : "
                                   "No such file or directory')"),
    ({"nccl": {"graph_xml": False}, "engine": {"env": {"NCCL_GRAPH_FILE": ""}}}, "engine.env.NCCL_GRAPH_FILE",
     "an empty NCCL_GRAPH_FILE fails NCCL init too"),
    ({"engine": {"flags": {"--tensor-parallel-size": "eight"}}}, "engine.flags.--tensor-parallel-size",
     "--tensor-parallel-size must be a whole number of GPUs, 1 or more (got 'eight')"),
])
def test_layouts_the_graph_breaks_are_refused_naming_the_setting(overrides: dict, field: str, says: str) -> None:
    line = _refusal(overrides)
    source, named, _ = line.split(": ", 2)
    # The file that set the named value: the override, or the rig's profile for nccl.graph_xml.
    assert source in ("host data 'profile_overrides'", "inventory/profiles/8x-turin.yaml"), line
    assert named == field and says in line, line
    assert "\n" not in line and "(+" not in line


@pytest.mark.parametrize("overrides", [
    _vllm({"--tensor-parallel-size": 8, "--decode-context-parallel-size": 8}),  # rig-facts §5: DCP=8 is fine
    _vllm({"--tensor-parallel-size": 1, "--data-parallel-size": 8}),  # one GPU per replica, DP group of 8
    {"engine": {"flags": {"--dp": 8, "--enable-dp-attention": True}}},  # attention groups of one GPU
    {"engine": {"flags": {"--ep": 8}}},
    {"engine": {"flags": {"--tensor-parallel-size": "8"}}},
    {"engine": {"docker": {"gpus": "device=0,1,2,3,4,5,6,7"}}},
    {"engine": {"env": {"NCCL_GRAPH_FILE": "/etc/nccl_graph_opt.xml"}}},  # the published command's own -e
    # Without the graph any layout loads.
    {"nccl": {"graph_xml": False}, "engine": {"flags": {"--tensor-parallel-size": 4}}},
])
def test_layouts_that_fit_the_graph_or_get_none_load(overrides: dict) -> None:
    load_profile("8x-turin", overrides)


def test_a_layout_without_a_graph_is_never_judged() -> None:
    load_profile("2x-pix", {"engine": {"flags": {"--tensor-parallel-size": "two"}}})


def _with_flags(flags: dict) -> Profile:
    """8x-turin with exactly these engine flags (model_copy: the engine section's own checks do not run)."""
    profile = load_profile("8x-turin")
    return profile.model_copy(update={"engine": profile.engine.model_copy(update={"flags": flags})})


@pytest.mark.parametrize(("flags", "flag", "says"), [
    ({"--tp": 2}, "--tp", "--tp 2 makes tensor-parallel groups of 2 GPUs"),
    ({"--tensor-parallel": 8}, "--tensor-parallel",
     "--tensor-parallel abbreviates --tensor-parallel-size: write the flag in full"),
    ({"--tp-size": 8, "--tensor-parallel-size": 8}, "--tp-size",
     "the tensor-parallel size is given twice (--tensor-parallel-size and --tp-size)"),
])
def test_each_spelling_of_a_size_is_read(flags: dict, flag: str, says: str) -> None:
    with pytest.raises(FieldError) as error:
        check_graph_layout(_with_flags(flags))
    assert error.value.loc == ("engine", "flags", flag) and says in str(error.value)
    assert engine_groups(_with_flags({"--tp": 8})) == [Group("tensor-parallel", 8, "--tp", "--tp 8")]


def test_each_engine_recipe_is_checked_where_it_sets_the_layout() -> None:
    """A recipe is validated as the profile it makes, so the same check runs on it; the line names the recipe."""
    recipes = {"today": {"description": "as the profile is", "source": "rig-facts §4.4"},
               "tp4dp2": {"description": "TP 4 x DP 2", "source": "a layout the graph breaks",
                          "flags": {"--tensor-parallel-size": 4, "--dp-size": 2}}}
    line = _refusal({"engine": {"recipes": recipes, "recipe": "today"}})
    assert line.startswith("host data 'profile_overrides': engine.recipes.tp4dp2.flags.--tensor-parallel-size: "
                           "--tensor-parallel-size 4 makes tensor-parallel groups of 4 GPUs"), line
    # The rig's engine env file gives the graph to every recipe; an empty value in the recipe's env fails NCCL too.
    recipes["tp4dp2"]["env"] = {"NCCL_GRAPH_FILE": ""}
    line = _refusal({"engine": {"recipes": recipes, "recipe": "today"}})
    assert line.startswith("host data 'profile_overrides': engine.recipes.tp4dp2.env.NCCL_GRAPH_FILE: an empty "), line
    profile = load_profile("8x-turin", {"engine": {"recipes": {"today": recipes["today"]}, "recipe": "today"}})
    assert engine_graph_file(profile.with_recipe("today")) == "/etc/nccl_graph_opt.xml"


def test_an_engine_overlay_is_checked_by_the_same_function() -> None:
    """How an engine recipe (flags and env over the profile's) is checked: the profile with the overlay."""
    profile = load_profile("8x-turin")

    def overlaid(flags: dict, env: dict) -> Profile:
        engine = profile.engine.model_copy(update={"flags": {**profile.engine.flags, **flags},
                                                   "env": {**profile.engine.env, **env}})
        return profile.model_copy(update={"engine": engine})

    with pytest.raises(FieldError) as error:
        check_graph_layout(overlaid({"--tensor-parallel-size": 4}, {}))
    assert error.value.loc == ("engine", "flags", "--tensor-parallel-size")
    check_graph_layout(overlaid({"--tensor-parallel-size": 8}, {"NCCL_GRAPH_FILE": "/etc/nccl_graph_opt.xml"}))
