"""Engine recipes: named overlays of what serving is made of, with the numbers their sources published.

A recipe sets only what the engine is run from — its kind, image (pulled or built: build args and patches),
native server, docker run settings, command, flags, environment and health timeout — and the model checkpoint
(``model``). ``apply_recipe`` lays it over the profile's ``engine`` and ``model`` sections:

- mappings merge key by key (``flags``, ``env``, ``build.args``, ``docker.volumes``…); a ``null`` value removes
  the key (a published command without the profile's ``--speculative-config``);
- ``replace: [flags, env]`` starts those mappings empty instead (a published command that shares little with
  the profile's);
- anything else replaces the profile's value; giving ``image``, ``build`` or ``native`` drops the other two;
- a recipe that changes ``kind`` starts from no command, flags, env or image: an engine's flags mean nothing to
  another engine (a build keeps its stack's args: the recipe names its Dockerfile and removes what it lacks).

The profile's own ``engine`` section is what every recipe starts from; ``engine.recipe`` names the one a rig
runs unless told otherwise. Every value keeps its ``# source:`` comment in the profile file.

Example::

    profile = load_profile("4x-threadripper")
    marlin = apply_recipe(profile, "marlin")      # a Profile whose engine and model are the recipe's
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from rigforge.profile.model_size import Quantisation
from rigforge.profile.types import (
    AbsPath,
    CliFlag,
    EnvName,
    HttpUrl,
    ImageRef,
    Name,
    PositiveInt,
    RepoId,
    SafeText,
    Size,
    StrictModel,
)

#: The engine settings a recipe may set (besides ``model``); everything else of a rig is not a recipe's.
ENGINE_KEYS = ("kind", "image", "build", "native", "docker", "command", "flags", "env", "health_timeout_s")
#: Recipe fields that describe the recipe rather than set anything.
ABOUT_KEYS = ("description", "source", "claims", "differences", "fork", "engine_release", "replace", "startup",
              "kept_unread")
#: Only one of these runs an engine; a recipe giving one drops the others.
RUN_WAYS = ("image", "build", "native")
#: What a recipe that changes the engine's kind does not inherit.
KIND_BOUND = ("command", "flags", "env", "image", "native")

FlagValue = bool | int | float | SafeText | dict[str, Any]

#: What an engine reports at start that a recipe may promise (rigforge/recipes/startup.py reads each from the
#: engine's own start-up lines, with the release's source line it comes from).
StartupItem = Literal["moe_backend", "attention_backend", "quantization", "kv_cache_dtype", "speculative",
                      "tensor_parallel_size", "pipeline_parallel_size", "custom_all_reduce", "threads", "context",
                      "slots"]
StartupValue = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:+-]{1,60}$")]


class RecipeBuild(StrictModel):
    """An image build over the profile's: ``args`` merge key by key, ``patches`` replace the list."""

    dockerfile: Name | None = None
    base_image: ImageRef | None = None
    args: dict[EnvName, SafeText | None] = {}
    # Patches as in engine.build.patches (checked when the recipe is applied); the list replaces the profile's.
    patches: list[dict[str, Any]] | None = None


class RecipeNative(StrictModel):
    package: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+==[A-Za-z0-9_.+-]+$")] | None = None
    threads: PositiveInt | None = None
    parallel: PositiveInt | None = None
    context: PositiveInt | None = None


class RecipeDocker(StrictModel):
    gpus: Annotated[str, StringConstraints(pattern=r"^(all|device=[0-9,]+)$")] | None = None
    ipc: Literal["host", "private", "shareable"] | None = None
    shm_size: Size | None = None
    ulimits: dict[Annotated[str, StringConstraints(pattern=r"^[a-z]+$")], int] = {}
    volumes: dict[AbsPath | Name, AbsPath] = {}


class RecipeModel(StrictModel):
    """Another checkpoint: its weights live at their own ``path``, beside the other recipes'."""

    source: Literal["huggingface", "mirror", "local"] | None = None
    repo_id: RepoId | None = None
    revision: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._/-]{1,100}$")] | None = None
    allow_patterns: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9*?._/-]+$")]] | None = None
    path: AbsPath | None = None
    size_gb: Annotated[float, Field(gt=0)] | None = None
    parameters: Annotated[float, Field(gt=0)] | None = None
    quantisation: Quantisation | None = None
    files: list[dict[str, Any]] | None = None
    mirror_url: HttpUrl | None = None
    local_path: SafeText | None = None


class Claim(StrictModel):
    """A number a recipe's source published, shown beside what the rig measured in the same cell."""

    metric: Literal["decode_tps_per_user", "output_tps", "ttft_p50_ms"]
    concurrency: PositiveInt
    value: Annotated[float, Field(ge=0)]
    # The prompt length the source used; None: it does not say (shown beside the shortest prompt measured).
    input_tokens: PositiveInt | None = None
    output_tokens: PositiveInt | None = None
    # How the source measured it, in its words (prompt, tool, runs, thinking on or off).
    measured: SafeText
    source: SafeText


class Fork(StrictModel):
    """Flags and variables that only a fork of the engine accepts (a community image's branch)."""

    name: SafeText  # the fork, e.g. "github.com/voipmonitor/sglang branch blackwell-cu130"
    flags: list[CliFlag] = []
    env: list[EnvName] = []


class Recipe(StrictModel):
    # What the recipe is, in one line, and where it comes from (a post, a rig-facts section).
    description: SafeText
    source: SafeText
    kind: Literal["sglang", "vllm", "llama.cpp"] | None = None
    image: ImageRef | None = None
    build: RecipeBuild | None = None
    native: RecipeNative | None = None
    docker: RecipeDocker | None = None
    command: list[SafeText] | None = None
    flags: dict[CliFlag, FlagValue | None] = {}
    env: dict[EnvName, SafeText | None] = {}
    health_timeout_s: PositiveInt | None = None
    model: RecipeModel | None = None
    # Mappings this recipe gives whole instead of merging over the profile's.
    replace: list[Literal["flags", "env"]] = []
    claims: list[Claim] = []
    # Where what rigforge renders differs from the published command line, and why: the published flag, docker
    # option or variable (or "image", "command", "docker") -> the reason. tests/unit/test_recipes_published.py
    # holds each quoted command line and lets nothing else differ.
    differences: dict[Annotated[str, StringConstraints(min_length=1, max_length=80)], SafeText] = {}
    fork: Fork | None = None
    # The engine release on PyPI whose own argument parser judges this recipe's flags (the slow parser tests).
    engine_release: Annotated[str, StringConstraints(pattern=r"^(vllm|sglang)==[A-Za-z0-9.+]+$")] | None = None
    # What the engine must report at start for this recipe to be what it says (the tournament disqualifies, the
    # verify suite fails, a recipe whose engine chose otherwise): item -> value as the engine logs it.
    startup: dict[StartupItem, StartupValue] = {}
    # Engine variables (VLLM_*, SGLANG_*) set as the source published them although engine_release does not read
    # them (rigforge/profile/engine_reads.py): name -> why the recipe keeps it. Any other unread one is refused.
    kept_unread: dict[EnvName, SafeText] = {}


def merged_mapping(base: dict[str, Any] | None, overlay: dict[str, Any]) -> dict[str, Any]:
    """``overlay`` over ``base`` key by key; a None value removes the key."""
    merged = dict(base or {})
    for key, value in overlay.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def _section(base: dict[str, Any] | None, overlay: dict[str, Any], mappings: tuple[str, ...]) -> dict[str, Any]:
    """A nested section (build, native, docker, model): scalars replaced, the named mappings merged."""
    merged = dict(base or {})
    for key, value in overlay.items():
        merged[key] = merged_mapping(merged.get(key), value) if key in mappings else value
    return merged


def _given(recipe: Recipe) -> dict[str, Any]:
    """The engine settings the recipe gives: fields left at None or empty are not given.

    Judged on values rather than on which fields were set, so a recipe read back from its JSON dump (the
    inventory stores the profile as data) overlays exactly as the one read from the profile file.
    """
    given = {}
    for key in ENGINE_KEYS:
        value = getattr(recipe, key)
        if isinstance(value, StrictModel):
            value = {name: item for name, item in value.model_dump(mode="json").items() if item not in (None, {})}
        if value is not None and (value != {} or key in recipe.replace):
            given[key] = value
    return given


def overlay_data(engine: dict[str, Any], model: dict[str, Any], recipe: Recipe) -> tuple[dict, dict]:
    """The engine and model sections (plain data) with ``recipe`` laid over them; nothing validated yet."""
    engine = dict(engine)
    given = _given(recipe)
    if given.get("kind") not in (None, engine.get("kind")):
        for key in KIND_BOUND:
            engine[key] = {} if key in ("flags", "env") else ([] if key == "command" else None)
    for way in RUN_WAYS:
        if way in given:
            for other in RUN_WAYS:
                if other != way:
                    engine[other] = None
    for key, value in given.items():
        if key in ("flags", "env"):
            engine[key] = merged_mapping(None if key in recipe.replace else engine.get(key), value)
        elif key == "build":
            engine[key] = _section(engine.get(key), value, ("args",))
        elif key == "docker":
            engine[key] = _section(engine.get(key), value, ("ulimits", "volumes"))
        elif key == "native":
            engine[key] = _section(engine.get(key), value, ())
        else:
            engine[key] = value
    if recipe.model is not None:
        overlay = {name: item for name, item in recipe.model.model_dump(mode="json").items() if item is not None}
        model = _section(model, overlay, ())
    return engine, model


def recipe_location(loc: tuple[str, ...], name: str, recipe: Recipe) -> tuple[str, ...]:
    """Where an error in the merged profile sits in the profile file: in the recipe when the recipe set it.

    + loc: the field path of the error in the profile with the recipe applied (``engine.flags.--x``)
    + name: the recipe's name
    + recipe: the recipe

    >>> recipe_location(("engine", "flags", "-x"), "marlin", Recipe(description="d", source="s", flags={}))
    ('engine', 'flags', '-x')
    """
    given = _given(recipe)
    model = recipe.model.model_dump(exclude_none=True) if recipe.model is not None else {}
    if loc == ("engine",):  # a rule across the engine's settings: the profile's own engine passed it
        return ("engine", "recipes", name)
    if len(loc) >= 2 and loc[0] == "engine" and loc[1] in given:
        return ("engine", "recipes", name, *loc[1:])
    if len(loc) >= 2 and loc[0] == "model" and loc[1] in model:
        return ("engine", "recipes", name, *loc)
    return loc


#: The flags rigforge itself gives each engine (model, served name, listen address) from model.path,
#: engine.served_model_name, engine.host and engine.port: a profile or recipe giving them again is refused.
RIGFORGE_FLAGS: dict[str, dict[str, str]] = {
    "sglang": {"model": "--model-path", "name": "--served-model-name", "host": "--host", "port": "--port"},
    "vllm": {"model": "--model", "name": "--served-model-name", "host": "--host", "port": "--port"},
    "llama.cpp": {"model": "--model", "name": "--alias", "host": "--host", "port": "--port"},
}

#: Spellings the engines accept for one option (argparse also takes any unambiguous prefix of a long flag).
FLAG_ALIASES = {
    "--tp": "--tensor-parallel-size", "--tp-size": "--tensor-parallel-size",
    "--dp": "--data-parallel-size", "--dp-size": "--data-parallel-size",
    "--pp": "--pipeline-parallel-size", "--pp-size": "--pipeline-parallel-size",
    "--dcp": "--decode-context-parallel-size",
}


def same_option(flags: list[str]) -> tuple[str, str] | None:
    """Two flags of one engine command that name the same option, or None.

    An alias (``--tp-size`` and ``--tensor-parallel-size``) or an abbreviation argparse expands
    (``--speculative-algo`` for ``--speculative-algorithm``): the engine keeps whichever comes last. A flag that
    another continues with a new word (``--model`` and ``--model-loader-extra-config``, ``--enable-metrics`` and
    ``--enable-metrics-for-all-schedulers``) is an option of its own.

    >>> same_option(["--speculative-algo", "--speculative-algorithm"])
    ('--speculative-algo', '--speculative-algorithm')
    >>> same_option(["--model", "--model-loader-extra-config"]) is None
    True
    """
    canonical = {flag: FLAG_ALIASES.get(flag, flag) for flag in flags}
    for index, first in enumerate(flags):
        for second in flags[index + 1:]:
            short, long = sorted((canonical[first], canonical[second]), key=len)
            if short == long or (long.startswith(short) and long[len(short)] != "-"):
                return first, second
    return None
