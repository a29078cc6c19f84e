"""Each GPU recipe judged by its engine's own release: the argument parser and the variables of ``engine_release``.

Slow (the releases are installed from PyPI into .cache/engines/ on first use): run with
``pytest -m slow tests/unit/test_engine_parsers.py``. Real parts: the vLLM and SGLang releases from PyPI and their
own parsers, registries and variable lists, run on the launch rigforge renders for the recipe (the words after the
engine command, rigforge's --model/--host/--port/--served-model-name included; the recipe's engine env and the
rig's env file). The one stand-in: no GPU here, so vLLM is told it runs on its CPU platform
(tests/support_engine_probe.py says why that leaves the flags and their choices as they are).

A flag the release does not know or whose value it refuses fails, naming the recipe and the flag, unless the
recipe declares it in ``fork.flags`` (only the named fork accepts it); a ``VLLM_*``/``SGLANG_*`` variable the release
never reads fails unless the recipe declares it in ``fork.env`` or keeps it on purpose in ``kept_unread`` (with
why). A declaration the release contradicts (it accepts the flag, reads the variable) fails too: declarations stay
exact. The table the profile loader judges variables by (rigforge/profile/engine_reads.RELEASE_READS) is held to
the release here: each variable it lists for a release is one that release reads.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rigforge.profile.engine_reads import RELEASE_READS
from rigforge.profile.loader import load_profile
from tests.support_engines import engine_launch, judge_launches, judged_recipes

CASES = judged_recipes()


@pytest.fixture(scope="module")
def verdicts() -> Callable[[str], dict[str, dict]]:
    """The verdicts of one release on every recipe it judges: one process per release, run when first asked."""
    judged: dict[str, dict[str, dict]] = {}

    def of(release: str) -> dict[str, dict]:
        if release not in judged:
            launches = {}
            for profile_name, recipe in CASES:
                profile = load_profile(profile_name)
                if profile.engine.recipes[recipe].engine_release == release:
                    launches[f"{profile_name}:{recipe}"] = engine_launch(profile.with_recipe(recipe))
            judged[release] = judge_launches(release, launches)
        return judged[release]

    return of


@pytest.mark.slow
@pytest.mark.parametrize(("profile_name", "recipe_name"), CASES, ids=[f"{p}:{r}" for p, r in CASES])
def test_the_engine_release_accepts_the_recipe(profile_name: str, recipe_name: str,
                                               verdicts: Callable[[str], dict[str, dict]]) -> None:
    recipe = load_profile(profile_name).engine.recipes[recipe_name]
    release = recipe.engine_release
    verdict = verdicts(release)[f"{profile_name}:{recipe_name}"]
    fork_flags, fork_env = (recipe.fork.flags, recipe.fork.env) if recipe.fork else ([], [])
    fork = recipe.fork.name if recipe.fork else "none declared"
    published = recipe.kept_unread
    refused = {entry["flag"]: entry["message"] for entry in verdict["refused"]}
    unread = set(verdict["unread"])

    problems = [f"{release} refuses {flag or 'the launch'}: {message}" for flag, message in refused.items()
                if flag not in fork_flags]
    problems += [f"fork.flags has {flag}, but {release} accepts it (only what the fork alone accepts belongs there)"
                 for flag in fork_flags if flag not in refused]
    problems += [f"sets {name}, which {release} never reads: the recipe is not what it claims (pin the release it "
                 f"was written for, declare the variable in fork.env with the fork that reads it, or say in "
                 f"kept_unread why the published recipe keeps it)"
                 for name in sorted(unread - set(fork_env) - set(published))]
    read_at = {name: " at " + ", ".join(places) for name, places in verdict["read_at"].items()}
    problems += [f"{name} is declared unread ({'fork.env' if name in fork_env else 'kept_unread'}), but "
                 f"{release} reads it{read_at.get(name, '')}"
                 for name in sorted((set(fork_env) | set(published)) - unread)]
    listed = set(RELEASE_READS.get(release, {}))
    problems += [f"rigforge/profile/engine_reads.py lists {name} as read by {release}, which never reads it"
                 for name in sorted(listed & unread)]
    assert not problems, (f"{profile_name}:{recipe_name} judged by {release}'s own parser "
                          f"({', '.join(verdict['checked'])}; fork: {fork}):\n  " + "\n  ".join(problems))
    for name, why in published.items():
        print(f"{profile_name}:{recipe_name} sets {name}, which {release} never reads: {why}")


REFUSALS = [
    ("4x-threadripper", "wiki", {"--max-num-seqs": "many", "--no-such-flag": True}, {"VLLM_NO_SUCH_SWITCH": "1"},
     {"--max-num-seqs", "--no-such-flag"}),
    # marlin's --moe-backend is an option 0.19.1 reads and judges: a value outside its MoEBackend choices is refused
    # (vllm/config/kernel.py:12-21), so the marlin recipe's accepted `marlin` is one of them.
    ("4x-threadripper", "marlin", {"--moe-backend": "no_such_backend"}, {"VLLM_NO_SUCH_SWITCH": "1"},
     {"--moe-backend"}),
    ("2x-pix", "b12x-nextn", {"--speculative-algorithm": "NO_SUCH", "--kv-cache-dtype": "fp9"},
     {"SGLANG_NO_SUCH_SWITCH": "1"}, {"--fp4-gemm-backend", "--moe-runner-backend", "--speculative-algorithm",
                                      "--kv-cache-dtype"}),
]


@pytest.mark.slow
@pytest.mark.parametrize(("profile_name", "recipe_name", "flags", "env", "refused"), REFUSALS,
                         ids=[f"{p}:{r}" for p, r, *_ in REFUSALS])
def test_the_release_names_what_it_refuses(profile_name: str, recipe_name: str, flags: dict, env: dict,
                                           refused: set[str]) -> None:
    """The judge has teeth: an unknown flag, a refused value and an unread variable, each named."""
    kept = {name: "the test's own unread variable" for name in env}
    profile = load_profile(profile_name, {"engine": {"recipes": {recipe_name: {"flags": flags, "env": env,
                                                                               "kept_unread": kept}}}})
    release = profile.engine.recipes[recipe_name].engine_release
    verdict = judge_launches(release, {"bad": engine_launch(profile.with_recipe(recipe_name))})["bad"]
    assert {entry["flag"] for entry in verdict["refused"]} == refused, verdict
    assert set(env) <= set(verdict["unread"]), verdict
