"""The engine variables each pinned engine release reads: a recipe setting one its release does not read is
refused at load, unless the recipe keeps it on purpose (``kept_unread``, with why).

A variable a release never reads changes nothing, so a recipe setting it runs something other than its name
says (the HONEST post's ``VLLM_MOE_FORCE_MARLIN``: read by no vLLM release). Only the engines' own prefixes are
judged here (``VLLM_``, ``SGLANG_``); NCCL, CUDA and OpenMP variables are other programs'. Each entry says where
its release reads it (file and line of the release's own source, from its PyPI distribution); the slow test
tests/unit/test_engine_parsers.py runs each release and fails when a listed variable is not read by it, or a
variable set by a recipe is read but missing here.

Example::

    unread_variables("vllm==0.19.1", {"VLLM_MOE_FORCE_MARLIN": "1"})    # ['VLLM_MOE_FORCE_MARLIN']
"""

from __future__ import annotations

from collections.abc import Mapping

#: What the engines' own variables start with.
ENGINE_PREFIXES = ("VLLM_", "SGLANG_")

#: release -> variable -> where the release reads it.
RELEASE_READS: dict[str, dict[str, str]] = {
    "vllm==0.17.1": {
        "VLLM_WORKER_MULTIPROC_METHOD": "vllm/envs.py:735",
        "VLLM_LOG_STATS_INTERVAL": "vllm/envs.py:680",
        "VLLM_SLEEP_WHEN_IDLE": "vllm/envs.py:1343",
        "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8": "vllm/envs.py:1233",
    },
    "vllm==0.19.1": {
        "VLLM_WORKER_MULTIPROC_METHOD": "vllm/envs.py:752",
        "VLLM_LOG_STATS_INTERVAL": "vllm/envs.py:692",
        "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8": "vllm/envs.py:1257",
    },
    "vllm==0.33.0": {},
    "sglang==0.5.10.post1": {
        "SGLANG_ENABLE_SPEC_V2": "sglang/srt/environ.py:442",
        "SGLANG_ENABLE_JIT_DEEPGEMM": "sglang/srt/environ.py:378",
    },
}


def engine_variables(env: Mapping[str, object]) -> list[str]:
    """The names in ``env`` that are the engines' own (``VLLM_*``, ``SGLANG_*``), sorted."""
    return sorted(name for name in env if name.startswith(ENGINE_PREFIXES))


def unread_variables(release: str, env: Mapping[str, object]) -> list[str]:
    """The engine variables of ``env`` that ``release`` is not known to read (pure).

    + release: ``package==version`` as a recipe's ``engine_release`` names it
    + env: the variables the engine process gets

    >>> unread_variables("vllm==0.19.1", {"VLLM_MOE_FORCE_MARLIN": "1", "NCCL_P2P_LEVEL": "SYS"})
    ['VLLM_MOE_FORCE_MARLIN']
    """
    known = RELEASE_READS.get(release, {})  # a release not listed reads none that rigforge knows of
    return [name for name in engine_variables(env) if name not in known]
