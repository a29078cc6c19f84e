"""What a recipe says about its engine release and its fork, checked without the network.

The slow test (tests/unit/test_engine_parsers.py) installs each ``engine_release`` and runs its own parser; these
checks keep what it relies on honest at every commit: the pin is a real release number of the engine the recipe
runs, a vLLM image is built from the release that judges it, a fork's flags and variables are ones the recipe
really sets, under a named fork, and every variable declared unread is one the recipe sets.
"""

from __future__ import annotations

import pytest
from packaging.version import InvalidVersion, Version

from rigforge.profile.loader import ProfileError, load_profile
from rigforge.serving.engines import engine_env_file_variables
from tests.support_engines import RIG_PROFILES, engine_launch


def _engine_recipes() -> list[tuple[str, str]]:
    """(profile, recipe) for every recipe of the rig profiles that runs vLLM or SGLang."""
    found = []
    for name in RIG_PROFILES:
        profile = load_profile(name)
        found += [(name, recipe) for recipe in profile.engine.recipes
                  if profile.with_recipe(recipe).engine.kind in ("vllm", "sglang")]
    return found


ENGINE_RECIPES = _engine_recipes()
#: The recipes whose image is built from a vLLM tag, and those that declare a fork.
VLLM_BUILT = [(name, recipe) for name, recipe in ENGINE_RECIPES
              if (build := load_profile(name).with_recipe(recipe).engine.build) and "VLLM_REF" in build.args]
FORKED = [(name, recipe) for name, recipe in ENGINE_RECIPES if load_profile(name).engine.recipes[recipe].fork]


def _ids(cases: list[tuple[str, str]]) -> list[str]:
    return [f"{name}:{recipe}" for name, recipe in cases]


def release_problem(release: str | None, kind: str) -> str | None:
    """What is wrong with ``release`` as the engine_release of a recipe running ``kind``, or None.

    >>> release_problem("vllm==0.19.1", "vllm") is None
    True
    """
    if not release:
        return f"runs {kind} but names no engine_release for its parser to judge it"
    package, _, version = release.partition("==")
    if package != kind:
        return f"runs {kind}, but engine_release is {release}"
    try:
        parsed = Version(version)
    except InvalidVersion:
        return f"engine_release {release!r} is not a release number (PEP 440)"
    return None if str(parsed) == version else f"write engine_release as {package}=={parsed}"


@pytest.mark.parametrize(("profile_name", "recipe_name"), ENGINE_RECIPES, ids=_ids(ENGINE_RECIPES))
def test_engine_release_is_a_release_of_the_engine_the_recipe_runs(profile_name: str, recipe_name: str) -> None:
    profile = load_profile(profile_name)
    problem = release_problem(profile.engine.recipes[recipe_name].engine_release,
                              profile.with_recipe(recipe_name).engine.kind)
    assert problem is None, f"{profile_name}:{recipe_name}: {problem}"


@pytest.mark.parametrize(("release", "words"), [
    (None, "names no engine_release"), ("sglang==0.5.10", "runs vllm, but"), ("vllm==latest", "not a release"),
    ("vllm==0.19.01", "write engine_release as vllm==0.19.1"),
])
def test_a_wrong_release_is_named(release: str | None, words: str) -> None:
    assert words in (release_problem(release, "vllm") or "")


@pytest.mark.parametrize(("profile_name", "recipe_name"), VLLM_BUILT, ids=_ids(VLLM_BUILT))
def test_a_vllm_image_is_built_from_the_release_that_judges_it(profile_name: str, recipe_name: str) -> None:
    reference = load_profile(profile_name).with_recipe(recipe_name).engine.build.args["VLLM_REF"]
    release = load_profile(profile_name).engine.recipes[recipe_name].engine_release
    assert release == f"vllm=={reference.removeprefix('v')}", \
        f"{profile_name}:{recipe_name} builds vLLM {reference} but is judged by {release}"


@pytest.mark.parametrize(("profile_name", "recipe_name"), FORKED, ids=_ids(FORKED))
def test_a_fork_is_named_and_its_flags_and_variables_are_the_recipes(profile_name: str, recipe_name: str) -> None:
    profile = load_profile(profile_name)
    fork = profile.engine.recipes[recipe_name].fork
    assert fork.name.strip() and (fork.flags or fork.env), \
        f"{profile_name}:{recipe_name}: fork needs the fork's name and what only it accepts (flags, env)"
    rendered = profile.with_recipe(recipe_name)
    flags = {line[0] for line in engine_launch(rendered)["lines"]}
    variables = {**engine_env_file_variables(rendered), **rendered.engine.env}
    stray = sorted(set(fork.flags) - flags) + sorted(set(fork.env) - set(variables))
    assert not stray, f"{profile_name}:{recipe_name}: fork declares what the recipe does not set: {stray}"


def test_a_variable_the_release_does_not_read_is_refused_at_load() -> None:
    """A VLLM_/SGLANG_ variable its release does not read changes nothing: refused, naming it, unless kept on purpose
    (the release's reading itself is proved by the slow tests/unit/test_engine_parsers.py)."""
    with pytest.raises(ProfileError, match=r"engine.env VLLM_NO_SUCH_SWITCH is not read by vllm==0.17.1"):
        load_profile("4x-threadripper", {"engine": {"recipes": {"k64-tuned": {"env": {"VLLM_NO_SUCH_SWITCH": "1"}}}}})
    kept = load_profile("4x-threadripper", {"engine": {"recipes": {"k64-tuned": {
        "env": {"VLLM_NO_SUCH_SWITCH": "1"}, "kept_unread": {"VLLM_NO_SUCH_SWITCH": "as published"}}}}})
    assert "VLLM_NO_SUCH_SWITCH" in kept.with_recipe("k64-tuned").engine.env
    with pytest.raises(ProfileError, match=r"kept_unread names VLLM_NO_SUCH_SWITCH, which the recipe does not set"):
        load_profile("4x-threadripper", {"engine": {"recipes": {"wiki": {
            "kept_unread": {"VLLM_NO_SUCH_SWITCH": "as published"}}}}})
