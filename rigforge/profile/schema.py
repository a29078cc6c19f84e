"""The rig profile: every setting a rig needs, validated once into typed objects.

Roles, checks and the bench verdict all read a ``Profile``; none of them restates a setting.
Loading (base file + rig file + per-host overrides) lives in ``rigforge.profile.loader``; the value types
live in ``rigforge.profile.types``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, ValidationInfo, field_validator, model_validator

from rigforge.profile.access import EngineAuth, EngineFlag
from rigforge.profile.engine_reads import unread_variables
from rigforge.profile.gateway import Gateway
from rigforge.profile.measuring import Bench, DriverUpdate
from rigforge.profile.model_size import Quantisation, size_problem
from rigforge.profile.monitoring import Monitoring
from rigforge.profile.nccl_layout import check_graph_layout
from rigforge.profile.recipes import RIGFORGE_FLAGS, Recipe, merged_mapping, overlay_data, same_option
from rigforge.profile.types import (
    AbsPath,
    CudaVersion,
    DriverVersion,
    EnvName,
    HttpUrl,
    ImageRef,
    KernelParam,
    ModuleName,
    Name,
    Port,
    PositiveInt,
    RegistryDwords,
    RepoId,
    SafeText,
    Sha256,
    Size,
    StrictModel,
    SysctlKey,
)


class Gpus(StrictModel):
    count: Annotated[int, Field(ge=1, le=16)]
    model: SafeText  # substring expected in nvidia-smi's product name
    compute_capability: Annotated[str, StringConstraints(pattern=r"^\d{1,2}\.\d$")]
    memory_mib: PositiveInt  # per GPU, as nvidia-smi reports it
    bar1_mib: PositiveInt  # per GPU; 256 means Resizable BAR is off
    topology: Literal["PIX", "PXB", "NODE", "SYS", "NV"]  # worst link between any two GPUs
    pcie_gen: Annotated[int, Field(ge=1, le=6)]
    pcie_width: Literal[1, 2, 4, 8, 16]
    persistence_mode: bool
    power_limit_w: Annotated[int, Field(ge=100, le=1000)] | None = None


class AptRepo(StrictModel):
    """An apt repository with its signing key; ``{distro}`` and ``{arch}`` are filled per host."""

    url: HttpUrl
    key_url: HttpUrl
    key_fingerprint: Annotated[str, StringConstraints(pattern=r"^[A-F0-9]{40}$")] | None = None


class Apt(StrictModel):
    # Minutes an apt operation waits for dpkg's lock held by another process (unattended-upgrades after boot).
    lock_wait_minutes: Annotated[float, Field(ge=0, le=1440)]


class Driver(StrictModel):
    version: DriverVersion
    flavor: Literal["open", "proprietary"]
    repo: AptRepo
    hold: bool  # apt-mark hold so unattended upgrades cannot move it


class Cuda(StrictModel):
    version: CudaVersion


class Boot(StrictModel):
    kernel_params: list[KernelParam]

    @field_validator("kernel_params")
    @classmethod
    def _unique_keys(cls, params: list[str]) -> list[str]:
        _reject_duplicates([p.split("=", 1)[0] for p in params], "kernel parameter")
        return params


class Modprobe(StrictModel):
    options: dict[ModuleName, dict[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_]+$")], int | str]]
    blacklist: list[ModuleName]
    force_p2p_override: bool  # NVreg_RegistryDwords ForceP2P: direct-attach (NODE) rigs only
    # The NVreg_RegistryDwords value written when force_p2p_override is on: KEY=value pairs joined by ';'.
    p2p_registry_dwords: RegistryDwords

    @field_validator("options")
    @classmethod
    def _safe_values(cls, options: dict[str, dict[str, int | str]]) -> dict[str, dict[str, int | str]]:
        for params in options.values():
            for value in params.values():
                if isinstance(value, str) and not re.fullmatch(r"[A-Za-z0-9_.,:;=+-]+", value):
                    raise ValueError(f"option value {value!r} may hold only letters, digits and _.,:;=+-")
        return options


class Tuning(StrictModel):
    cpu_governor: Literal["performance", "schedutil", "ondemand", "powersave"] | None
    sysctl: dict[SysctlKey, int | Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_. -]+$")]]
    disable_acs: bool  # setpci at every boot on PCIe-switch rigs


class Nccl(StrictModel):
    env: dict[EnvName, SafeText]
    graph_xml: bool  # write the AMD graph XML and point NCCL_GRAPH_FILE at it
    graph_path: AbsPath

    @field_validator("env", mode="before")
    @classmethod
    def _string_values(cls, env: Any) -> Any:
        if not isinstance(env, dict):
            return env
        for key, value in env.items():
            if key == "NCCL_P2P_LEVEL" and isinstance(value, int):
                # Numeric P2P levels changed meaning across NCCL releases (rig-facts §10).
                raise ValueError("NCCL_P2P_LEVEL must be a name such as SYS, PHB or PIX, not a number")
        return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in env.items()}


class Container(StrictModel):
    runtime: Literal["docker"]
    nvidia_toolkit: bool
    toolkit_repo: AptRepo | None = None


class DockerRun(StrictModel):
    gpus: Annotated[str, StringConstraints(pattern=r"^(all|device=[0-9,]+)$")]
    ipc: Literal["host", "private", "shareable"]
    shm_size: Size
    ulimits: dict[Annotated[str, StringConstraints(pattern=r"^[a-z]+$")], int]
    volumes: dict[AbsPath | Name, AbsPath]  # host path or named volume -> container path
    network: Literal["host"]
    jit_cache_volume: Name | None = None  # named volume of JIT caches; emptied when the image changes

    @model_validator(mode="after")
    def _jit_cache_is_a_named_volume(self) -> DockerRun:
        if self.jit_cache_volume is not None and (
            self.jit_cache_volume.startswith("/") or self.jit_cache_volume not in self.volumes
        ):
            raise ValueError(f"jit_cache_volume {self.jit_cache_volume!r} must be a named volume listed in volumes")
        return self


class Patch(StrictModel):
    url: HttpUrl | None = None  # fetched on the rig into the build context
    path: Annotated[str, StringConstraints(pattern=r"^patches/[A-Za-z0-9._-]+\.patch$")] | None = None  # in this repo
    sha256: Sha256
    root: Literal["flashinfer"]  # tree the patch paths are relative to
    enabled: bool = True  # false: the patch is declared (and pinned) but not applied
    check: Literal["sm120-k64"] | None = None  # compile check run in the image right after applying

    @model_validator(mode="after")
    def _one_source(self) -> Patch:
        if (self.url is None) == (self.path is None):
            raise ValueError("give exactly one of url (fetched on the rig) or path (a file under patches/)")
        return self


class ImageBuild(StrictModel):
    dockerfile: Name  # template under templates/images/<name>.Dockerfile.j2
    base_image: ImageRef
    args: dict[EnvName, SafeText]
    patches: list[Patch]


class NativeServer(StrictModel):
    """A llama.cpp server installed from PyPI into a venv the engine role manages."""

    package: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+==[A-Za-z0-9_.+-]+$")]
    threads: PositiveInt
    parallel: PositiveInt
    context: PositiveInt


class Engine(StrictModel):
    kind: Literal["sglang", "vllm", "llama.cpp"]
    image: ImageRef | None = None
    build: ImageBuild | None = None
    native: NativeServer | None = None
    docker: DockerRun | None = None
    command: list[SafeText]  # program the flags are given to
    flags: dict[EngineFlag, bool | int | float | SafeText | dict[str, Any]]
    env: dict[EnvName, SafeText]
    host: Annotated[str, StringConstraints(pattern=r"^[0-9.]+$")]
    port: Port
    served_model_name: SafeText
    health_timeout_s: PositiveInt
    auth: EngineAuth  # who may call the API (rigforge/profile/access.py)
    # Named overlays of this section (and the model checkpoint): rigforge/profile/recipes.py.
    recipes: dict[Name, Recipe] = {}
    # The recipe a rig runs unless told otherwise (``--data recipe=NAME``); None: this section as it is.
    recipe: Name | None = None

    @model_validator(mode="after")
    def _one_way_to_run(self) -> Engine:
        ways = [w for w in ("image", "build", "native") if getattr(self, w) is not None]
        if len(ways) != 1:
            raise ValueError(f"set exactly one of image, build, native (got: {', '.join(ways) or 'none'})")
        if self.native is None and self.docker is None:
            raise ValueError("container engines need a docker section")
        return self

    @field_validator("recipe")
    @classmethod
    def _recipe_is_known(cls, recipe: str | None, info: ValidationInfo) -> str | None:
        recipes = info.data.get("recipes") or {}
        if recipe is not None and recipe not in recipes:
            raise ValueError(f"not one of engine.recipes ({', '.join(recipes) or 'none defined'})")
        return recipe

    @model_validator(mode="after")
    def _default_recipe_named(self) -> Engine:
        if self.recipes and self.recipe is None:
            raise ValueError(f"engine.recipe must name the default among engine.recipes ({', '.join(self.recipes)})")
        return self

    @model_validator(mode="after")
    def _variables_read(self) -> Engine:
        """A recipe's engine variables are read by its release, or kept on purpose with why."""
        recipe = self.recipes.get(self.recipe or "")
        if recipe is None or recipe.engine_release is None:
            return self
        # The env the recipe runs with (the same whether this engine section has the recipe laid over it yet).
        own = {} if "env" in recipe.replace or recipe.kind not in (None, self.kind) else self.env
        unread = unread_variables(recipe.engine_release, merged_mapping(own, recipe.env))
        refused = [name for name in unread if name not in recipe.kept_unread]
        if refused:
            raise ValueError(f"engine.env {refused[0]} is not read by {recipe.engine_release} "
                             "(rigforge/profile/engine_reads.py): it would change nothing. Remove it, pin the "
                             "release that reads it, or keep it on purpose in "
                             f"engine.recipes.{self.recipe}.kept_unread with why")
        stale = [name for name in recipe.kept_unread if name not in unread]
        if stale:
            raise ValueError(f"engine.recipes.{self.recipe}.kept_unread names {stale[0]}, which the recipe does not "
                             f"set or {recipe.engine_release} reads: declarations stay exact")
        return self

    @model_validator(mode="after")
    def _each_option_once(self) -> Engine:
        own = set(RIGFORGE_FLAGS[self.kind].values())
        words = [word for word in self.command if word.startswith("--")]
        given = [flag for flag, value in self.flags.items() if value is not False]  # false: left out
        twice = same_option([*sorted(own), *words, *given])
        if twice is None:
            return self
        first, second = twice
        if first in own:
            raise ValueError(f"engine.flags must not set {second}: rigforge gives {first} itself, from model.path, "
                             "engine.served_model_name, engine.host and engine.port")
        where = "engine.command and engine.flags" if first in words else "engine.flags"
        raise ValueError(f"{first} and {second} in {where} name the same option (the engine keeps the last one "
                         "given): keep one")


class ModelFile(StrictModel):
    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    sha256: Sha256
    size: PositiveInt


class Model(StrictModel):
    source: Literal["huggingface", "mirror", "local"]
    repo_id: RepoId | None = None
    revision: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._/-]{1,100}$")] | None = None
    allow_patterns: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9*?._/-]+$")]]
    path: AbsPath  # where the weights live on the rig
    size_gb: Annotated[float, Field(gt=0)]  # expected download size, for the disk-space check
    # The model's total parameter count and the checkpoint's quantisation: size_gb is refused below what they
    # take at least (rigforge/profile/model_size.py). None: not judged.
    parameters: Annotated[float, Field(gt=0)] | None = None
    quantisation: Quantisation | None = None
    files: list[ModelFile]  # single-file models: names with published hashes
    mirror_url: HttpUrl | None = None
    local_path: SafeText | None = None  # on the machine running pyinfra
    # huggingface source: the Hub's address (a site's Hub proxy or mirror); None: huggingface_hub's default.
    hf_endpoint: HttpUrl | None = None
    # Post-trained to answer in its chat format: the bench's chat probes judge its answers; a base model's
    # chat probes check the chat path only (template, turn markers, usage, streaming).
    chat_tuned: bool

    @model_validator(mode="after")
    def _source_has_location(self) -> Model:
        if self.source == "huggingface" and not (self.repo_id and self.revision):
            raise ValueError("source 'huggingface' needs repo_id and revision")
        if self.hf_endpoint and self.source != "huggingface":
            raise ValueError(f"hf_endpoint is for source 'huggingface', not '{self.source}'")
        if self.source == "mirror" and not self.mirror_url:
            raise ValueError("source 'mirror' needs mirror_url")
        if self.source == "local" and not self.local_path:
            raise ValueError("source 'local' needs local_path")
        if self.source != "huggingface" and not self.files:
            raise ValueError(f"source '{self.source}' needs files (names with sha256 and size)")
        return self

    @model_validator(mode="after")
    def _size_possible(self) -> Model:
        problem = size_problem(self.size_gb, self.parameters, self.quantisation)
        if problem:
            raise ValueError(problem)
        return self


class Profile(StrictModel):
    name: Name  # the profile file's name: the loader sets it, a value in a file is not read
    description: SafeText
    base_packages: list[Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9.+-]+$")]]
    apt: Apt
    gpus: Gpus | None  # None: a CPU-only rig (the sandbox)
    driver: Driver | None
    cuda: Cuda | None
    boot: Boot
    modprobe: Modprobe
    tuning: Tuning
    nccl: Nccl | None
    container: Container | None
    engine: Engine
    model: Model
    bench: Bench
    driver_update: DriverUpdate
    monitoring: Monitoring
    gateway: Gateway

    @model_validator(mode="after")
    def _consistent(self) -> Profile:
        if self.gpus is None and (self.driver or self.cuda or self.nccl):
            raise ValueError("a profile without gpus cannot have driver, cuda or nccl")
        if self.gpus is not None and self.driver is None:
            raise ValueError("a profile with gpus needs a driver")
        if self.modprobe.force_p2p_override and (self.gpus is None or self.gpus.topology != "NODE"):
            # ForceP2P breaks custom-allreduce crossover detection behind PCIe switches (rig-facts §1.5).
            raise ValueError("modprobe.force_p2p_override is only allowed when gpus.topology is NODE")
        if self.engine.native is None and self.container is None:
            raise ValueError("a container engine needs the container section")
        # The NCCL graph must fit every communicator the engine makes (rigforge.profile.nccl_layout).
        check_graph_layout(self)
        return self

    @property
    def has_gpus(self) -> bool:
        return self.gpus is not None

    def with_recipe(self, name: str | None) -> Profile:
        """This profile with the recipe ``name`` laid over its engine and model (rigforge/profile/recipes.py).

        + name: one of ``engine.recipes``; None: the profile's default recipe (``engine.recipe``)

        Example: ``load_profile("4x-threadripper").with_recipe("marlin").engine.flags``
        """
        name = name or self.engine.recipe
        if name is None:
            return self
        if name not in self.engine.recipes:
            raise ValueError(f"no recipe {name!r} in profile {self.name} (engine.recipes: "
                             f"{', '.join(self.engine.recipes) or 'none'})")
        data = self.model_dump(mode="json")
        engine, model = overlay_data(data["engine"], data["model"], self.engine.recipes[name])
        return Profile.model_validate({**data, "engine": {**engine, "recipe": name}, "model": model})

    @property
    def recipe_names(self) -> list[str]:
        """The profile's recipes, its default first."""
        return sorted(self.engine.recipes, key=lambda name: name != self.engine.recipe)


def _reject_duplicates(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"duplicate {what} {name!r}")
        seen.add(name)
