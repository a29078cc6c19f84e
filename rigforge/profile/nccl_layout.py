"""The NCCL graph XML against the engine's parallel layout: which NCCL communicators the engine's flags make,
and whether the graph NCCL is given fits every one of them.

NCCL reads ``NCCL_GRAPH_FILE`` at each communicator's init and fails that init when the graph names a GPU the
communicator lacks: its ``dev`` is the CUDA device of one of the communicator's ranks (NCCL
``src/graph/search.cc``: ``XML Import Channel : dev 1 not found.``, ncclSystemError; captured on a real GPU in
tests/fixtures/nccl/). The graph rigforge writes (rig-facts §5) names 8 GPUs, so every communicator of an
engine that gets it must hold all 8: tensor-parallel groups of 4 (TP 4 x DP 2), decode-context-parallel groups
of 4 (rig-facts §5 records DCP=4 failing), pipeline stages of 2 all fail at start. A group of one GPU makes no
communicator, so it is always fine.

    check_graph_layout(profile)           # raises FieldError naming the setting to change
    engine_graph_file(profile)            # "/etc/nccl_graph_opt.xml" or None
    engine_groups(profile)                # [Group("tensor-parallel", 8, "--tensor-parallel-size", ...), ...]

A pure function of the profile: the schema calls it when a profile loads, so a layout the graph breaks is
refused before any host is touched. An engine recipe is validated as the profile it makes
(``Profile.with_recipe``), so the same check runs on every recipe and the loader names the recipe's field
(``engine.recipes.NAME.flags.--tensor-parallel-size``).

The graph reaches the engine through the rig's engine env file, so every recipe of the rig gets it: docker
cannot take a variable of ``--env-file`` away again, and an empty ``NCCL_GRAPH_FILE`` fails NCCL init as well
(``Could not open XML graph file  : No such file or directory``, tests/fixtures/nccl/). A layout the graph breaks
runs only with ``nccl.graph_xml: false``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from rigforge.profile.types import FieldError

GRAPH_VARIABLE = "NCCL_GRAPH_FILE"
#: The graph rigforge writes (rig-facts §5, BLD:configs/nccl_graph_opt.xml): two ring graphs (graph id, search
#: pattern), each with two channels through these GPUs. NCCL reads ``dev`` as a rank's CUDA device number.
GRAPH_RINGS = ({"id": 0, "pattern": 4}, {"id": 1, "pattern": 1})
GRAPH_GPUS = ("0", "0x1", "0x2", "0x3", "0x4", "0x5", "0x6", "0x7")
#: The line NCCL prints when a communicator lacks a device the graph names (tests/fixtures/nccl/).
MISSING_DEVICE_LINE = "XML Import Channel : dev N not found"
#: ... and when NCCL_GRAPH_FILE names no file (empty, or a path the engine does not see).
MISSING_FILE_LINE = "Could not open XML graph file  : No such file or directory"


class _Gpus(Protocol):
    @property
    def count(self) -> int: ...


class _Nccl(Protocol):
    @property
    def env(self) -> Mapping[str, str]: ...
    @property
    def graph_xml(self) -> bool: ...
    @property
    def graph_path(self) -> str: ...


class _Docker(Protocol):
    @property
    def gpus(self) -> str: ...


class _Engine(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def flags(self) -> Mapping[str, Any]: ...
    @property
    def env(self) -> Mapping[str, str]: ...
    @property
    def docker(self) -> _Docker | None: ...


class Profile(Protocol):
    """What this module reads of a profile: ``rigforge.profile.Profile`` (whose schema calls this module, so it
    cannot be imported here), or the same with an engine recipe's overlay."""

    @property
    def gpus(self) -> _Gpus | None: ...
    @property
    def nccl(self) -> _Nccl | None: ...
    @property
    def engine(self) -> _Engine: ...


@dataclass(frozen=True)
class Dimension:
    """One parallel size an engine takes on its command line: what its groups are, and every spelling."""

    what: str
    flags: tuple[str, ...]


#: source: vLLM vllm/engine/arg_utils.py (vllm-project/vllm at 99d7eb5), the ParallelConfig argument group:
#: ``--tensor-parallel-size``/``-tp``, ``--pipeline-parallel-size``/``-pp``, ``--data-parallel-size``/``-dp``,
#: ``--decode-context-parallel-size``/``-dcp``; ``--prefill-context-parallel-size``/``-pcp`` in later releases.
#: Each makes groups of its size.
VLLM_DIMENSIONS = {
    "tp": Dimension("tensor-parallel", ("--tensor-parallel-size", "-tp")),
    "pp": Dimension("pipeline-parallel", ("--pipeline-parallel-size", "-pp")),
    "dp": Dimension("data-parallel", ("--data-parallel-size", "-dp")),
    "dcp": Dimension("decode-context-parallel", ("--decode-context-parallel-size", "-dcp")),
    "pcp": Dimension("prefill-context-parallel", ("--prefill-context-parallel-size", "-pcp")),
}
#: source: SGLang python/sglang/srt/arg_groups/fields/parallel.py (sgl-project/sglang at 0481724): ``tp_size`` ->
#: ``--tp-size`` with the alias ``--tensor-parallel-size``, ``pp_size``, ``dp_size``, ``dcp_size``,
#: ``attn_cp_size``, ``moe_dp_size``, ``ep_size`` with ``--expert-parallel-size``/``--ep``; ``--tp`` and ``--dp``
#: are argparse's abbreviations of ``--tp-size`` and ``--dp-size``. Without ``--enable-dp-attention`` each
#: data-parallel replica is a separate engine with its own communicators, so ``dp`` makes no group of its own.
SGLANG_DIMENSIONS = {
    "tp": Dimension("tensor-parallel", ("--tensor-parallel-size", "--tp-size", "--tp")),
    "pp": Dimension("pipeline-parallel", ("--pipeline-parallel-size", "--pp-size")),
    "dp": Dimension("data-parallel", ("--data-parallel-size", "--dp-size", "--dp")),
    "dcp": Dimension("decode-context-parallel", ("--decode-context-parallel-size", "--dcp-size")),
    "cp": Dimension("attention-context-parallel", ("--attention-context-parallel-size", "--attn-cp-size")),
    "ep": Dimension("expert-parallel", ("--expert-parallel-size", "--ep-size", "--ep")),
    "moe_dp": Dimension("MoE data-parallel", ("--moe-data-parallel-size", "--moe-dp-size")),
}
ENGINE_DIMENSIONS = {"vllm": VLLM_DIMENSIONS, "sglang": SGLANG_DIMENSIONS}
SGLANG_OWN_GROUPS = ("tp", "pp", "dcp", "cp", "ep", "moe_dp")
DP_ATTENTION = "--enable-dp-attention"


@dataclass(frozen=True)
class Group:
    """Ranks the engine gives one NCCL communicator.

    + what: the kind of group, in words (``tensor-parallel``)
    + size: GPUs in each such group
    + flag: the profile flag that makes it that size (the field a refusal names)
    + cause: how the flags make it, for the refusal line (``--tensor-parallel-size 4``)
    """

    what: str
    size: int
    flag: str
    cause: str


@dataclass(frozen=True)
class _Size:
    value: int
    flag: str | None  # None: the engine's default of 1


def graph_devices() -> tuple[int, ...]:
    """The CUDA devices the graph names, ascending.

    >>> graph_devices()
    (0, 1, 2, 3, 4, 5, 6, 7)
    """
    return tuple(sorted({int(dev, 0) for dev in GRAPH_GPUS}))


def engine_graph_file(profile: Profile) -> str | None:
    """The ``NCCL_GRAPH_FILE`` the engine gets: its own ``engine.env`` value (``docker run -e``, read after the env
    file) over the path ``nccl.graph_xml`` puts in the engine env file; None when it gets none.

    + profile: the rig's profile (with an engine recipe's overlay, if any)
    """
    if GRAPH_VARIABLE in profile.engine.env:
        return profile.engine.env[GRAPH_VARIABLE]
    if profile.nccl is not None and profile.nccl.graph_xml:
        return profile.nccl.graph_path
    return None


def engine_groups(profile: Profile) -> list[Group]:
    """The NCCL groups the engine's flags make, one entry per kind of group; none for engines without NCCL.

    + profile: the rig's profile (``engine.kind`` and ``engine.flags`` are read)

    Raises ``FieldError`` for a size that is not a whole number, a size given twice, or an abbreviated flag.
    """
    dimensions = ENGINE_DIMENSIONS.get(profile.engine.kind)
    if dimensions is None:
        return []
    flags = profile.engine.flags
    _refuse_abbreviations(flags, dimensions)
    sizes = {key: _size(flags, dimension) for key, dimension in dimensions.items()}
    if profile.engine.kind == "vllm":
        return _own_groups(sizes, dimensions, tuple(dimensions))
    groups = _own_groups(sizes, dimensions, SGLANG_OWN_GROUPS)
    tp, dp, cp, ep, moe_dp = (sizes[key] for key in ("tp", "dp", "cp", "ep", "moe_dp"))
    if flags.get(DP_ATTENTION) is True and dp.flag and tp.value % (dp.value * cp.value) == 0:
        # DP attention splits the tensor-parallel ranks into attention groups of tp / (dp x cp).
        groups.append(Group("attention tensor-parallel", tp.value // (dp.value * cp.value), dp.flag,
                            f"{dp.flag} {dp.value} with {DP_ATTENTION} on {tp.value} tensor-parallel GPUs"))
    split = ep if ep.flag else moe_dp
    if split.flag and tp.value % (ep.value * moe_dp.value) == 0:
        groups.append(Group("MoE tensor-parallel", tp.value // (ep.value * moe_dp.value), split.flag,
                            f"{split.flag} {split.value} on {tp.value} tensor-parallel GPUs"))
    return groups


def check_graph_layout(profile: Profile) -> None:
    """Refuse a profile whose engine gets an NCCL graph that one of its communicators cannot load.

    + profile: the rig's profile (with an engine recipe's overlay, if any)

    Raises ``FieldError`` naming the setting to change: ``NCCL_GRAPH_FILE`` in ``nccl.env`` (it would reach
    /etc/nccl.conf), a graph file rigforge does not write, a rig or container with another number of GPUs than
    the graph names, or an engine flag that makes groups of another size.

    Example: ``check_graph_layout(load_profile("8x-turin"))`` passes; with ``--tensor-parallel-size 4`` it raises.
    """
    if profile.nccl is not None and GRAPH_VARIABLE in profile.nccl.env:
        raise FieldError(f"{GRAPH_VARIABLE} goes only into the engine's environment, never /etc/nccl.conf, which "
                         "every NCCL program on the rig reads: set nccl.graph_xml: true instead",
                         ("nccl", "env", GRAPH_VARIABLE))
    graph = engine_graph_file(profile)
    if graph is None:
        return
    setting = ("engine", "env", GRAPH_VARIABLE) if GRAPH_VARIABLE in profile.engine.env else ("nccl", "graph_xml")
    if not graph:
        raise FieldError(f"an empty {GRAPH_VARIABLE} fails NCCL init too ('{MISSING_FILE_LINE}'), and docker cannot "
                         "take away the variable the engine env file gives: leave it out here, and run an engine "
                         "without the graph with nccl.graph_xml: false", setting)
    nccl = profile.nccl
    if not (nccl is not None and nccl.graph_xml and graph == nccl.graph_path):
        raise FieldError(f"{graph} is not the graph rigforge writes, so its GPUs are unknown: set nccl.graph_xml: "
                         f"true (written to nccl.graph_path) and leave {GRAPH_VARIABLE} out of engine.env", setting)
    devices = graph_devices()
    span = f"{len(devices)} GPUs (dev {devices[0]}-{devices[-1]})"
    fails = f"NCCL fails every communicator that lacks one of them at init ('{MISSING_DEVICE_LINE}')"
    gpu_count = profile.gpus.count if profile.gpus is not None else 0
    if gpu_count != len(devices):
        raise FieldError(f"the NCCL graph names {span} and gpus.count is {gpu_count}: {fails}; set nccl.graph_xml: "
                         "false on this rig", setting)
    docker = profile.engine.docker
    if docker is not None and docker.gpus != "all" and len(docker.gpus.split("=", 1)[1].split(",")) != len(devices):
        raise FieldError(f"the container sees {docker.gpus} and the NCCL graph names {span}: {fails}; give the "
                         f"engine all {len(devices)} GPUs or no graph", ("engine", "docker", "gpus"))
    for group in engine_groups(profile):
        if group.size > 1 and group.size != len(devices):
            raise FieldError(
                f"{group.cause} makes {group.what} groups of {group.size} GPUs, and the NCCL graph this engine gets "
                f"({'.'.join(setting)}) names {span}: {fails}; run this layout without the graph (nccl.graph_xml: "
                f"false: the engine env file gives it to every recipe of the rig) or make every group "
                f"{len(devices)} GPUs", ("engine", "flags", group.flag))


def _own_groups(sizes: dict[str, _Size], dimensions: dict[str, Dimension], keys: tuple[str, ...]) -> list[Group]:
    return [Group(dimensions[key].what, size.value, size.flag, f"{size.flag} {size.value}")
            for key in keys if (size := sizes[key]).flag is not None]


def _size(flags: Mapping[str, Any], dimension: Dimension) -> _Size:
    """The size one dimension is given (1 when no flag sets it)."""
    given = [flag for flag in dimension.flags if flags.get(flag, False) is not False]  # false: flag left out
    if not given:
        return _Size(1, None)
    if len(given) > 1:
        raise FieldError(f"the {dimension.what} size is given twice ({' and '.join(given)}): give it once",
                         ("engine", "flags", given[1]))
    flag, value = given[0], flags[given[0]]
    number = value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(value, str) and value.isdigit():
        number = int(value)
    if number is None or number < 1:
        raise FieldError(f"{flag} must be a whole number of GPUs, 1 or more (got {value!r})",
                         ("engine", "flags", flag))
    return _Size(number, flag)


def _refuse_abbreviations(flags: Mapping[str, Any], dimensions: dict[str, Dimension]) -> None:
    """An abbreviated parallel flag (argparse takes any unambiguous prefix) would hide the layout from the check."""
    spelled = {flag for dimension in dimensions.values() for flag in dimension.flags}
    for flag in (flag for flag, value in flags.items() if value is not False):
        full = sorted(name for name in spelled if name.startswith(flag) and name != flag)
        if flag not in spelled and full:
            raise FieldError(f"{flag} abbreviates {' or '.join(full)}: write the flag in full",
                             ("engine", "flags", flag))
