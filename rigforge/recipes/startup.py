"""What an engine says it chose at start, read from its own start-up lines, against what a recipe promises.

vLLM and SGLang pick MoE, attention and GEMM backends, quantisation methods, custom all-reduce and speculative
settings themselves, and fall back silently when a kernel is missing for the GPU; they log what they picked.
Each reader below is the text of one release's own log line (file and line of its source, from its PyPI
distribution), so a recipe whose flags were accepted but whose engine runs something else is named as such:
"runs MoE backend FLASHINFER_CUTLASS, not MARLIN". llama.cpp's server names its threads, context and slots.

The health wait keeps the lines holding a reader's needle (``startup_needles``) of the engine's start
(templates/service/wait-healthy.sh.j2); a tournament trial disqualifies, and the verify suite fails, a recipe whose
report differs from its ``startup`` declaration (rigforge/profile/recipes.py).

Example::

    startup_mismatches("vllm", {"moe_backend": "MARLIN"}, lines)
    # ["runs MoE backend FLASHINFER_CUTLASS, not MARLIN
    #   (vllm/model_executor/layers/fused_moe/oracle/nvfp4.py:189, 226, 256)"]
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: Where the health wait keeps the start-up lines of the engine's current start, headed "# invocation <id>".
STARTUP_RECORD = "/var/lib/rigforge/engine-startup.log"


@dataclass(frozen=True)
class Reader:
    """How one start-up item is read from one engine's log.

    + needle: a fixed string every line that reports it holds (what the health wait keeps); ``also``: another
    + pattern: a regular expression whose groups give the value (joined by ':' when several)
    + source: the release's file and line that writes it
    """

    needle: str
    pattern: str
    source: str
    also: str | None = None

    def holds_needle(self, line: str) -> bool:
        return self.needle in line or (self.also is not None and self.also in line)

    def read(self, line: str) -> str | None:
        found = re.search(self.pattern, line)
        return ":".join(group for group in found.groups() if group is not None) if found else None


#: Item -> its name in a sentence.
ITEM_NAMES = {
    "moe_backend": "MoE backend", "attention_backend": "attention backend", "quantization": "quantisation",
    "kv_cache_dtype": "KV cache dtype", "speculative": "speculative decoding", "tensor_parallel_size": "TP size",
    "pipeline_parallel_size": "PP size", "custom_all_reduce": "custom all-reduce", "threads": "threads",
    "context": "context", "slots": "slots",
}

_VLLM_CONFIG = "Initializing a V1 LLM engine"  # vllm/v1/engine/core.py:106 prints VllmConfig.__str__
_VLLM_CONFIG_SOURCE = "vllm/v1/engine/core.py:106 with vllm/config/vllm.py:{}"
# sglang/srt/entrypoints/engine.py:648 logs f"{server_args=}": ServerArgs' repr on one line, each field as
# name=value; each field is its own needle, so a quoted part of that line reads as the whole does.
_SGLANG_SOURCE = "sglang/srt/entrypoints/engine.py:648 (ServerArgs.{})"

#: engine kind -> item -> reader; vLLM's from v0.19.1, SGLang's from 0.5.10.post1, llama.cpp's from its server.
READERS: dict[str, dict[str, Reader]] = {
    "vllm": {
        "moe_backend": Reader("NvFp4 MoE backend out of potential backends",
                              r"Using '(\w+)' NvFp4 MoE backend out of potential backends",
                              "vllm/model_executor/layers/fused_moe/oracle/nvfp4.py:189, 226, 256"),
        # Chosen by vLLM (cuda.py:334-335), or the one --attention-backend selected (cuda.py:274: "Using
        # AttentionBackendEnum.X backend."; a selected backend that is not valid raises instead of falling back).
        "attention_backend": Reader("attention backend out of potential backends",
                                    r"Using (?:(\w+) attention backend out of potential backends|"
                                    r"AttentionBackendEnum\.(\w+) backend\.)",
                                    "vllm/platforms/cuda.py:274, 335", also="Using AttentionBackendEnum."),
        "quantization": Reader(_VLLM_CONFIG, r"with config: .*?\bquantization=([\w-]+)",
                               _VLLM_CONFIG_SOURCE.format(1690)),
        "kv_cache_dtype": Reader(_VLLM_CONFIG, r"with config: .*?\bkv_cache_dtype=(\w+)",
                                 _VLLM_CONFIG_SOURCE.format(1693)),
        # SpeculativeConfig.__repr__ (vllm/config/speculative.py:879): method and num_spec_tokens; None: none.
        "speculative": Reader(_VLLM_CONFIG, r"with config: .*?\bspeculative_config=(?:(None)|SpeculativeConfig\(method="
                                            r"'(\w+)', model=.*?, num_spec_tokens=(\d+)\))",
                              _VLLM_CONFIG_SOURCE.format(1673) + " and vllm/config/speculative.py:879"),
        "tensor_parallel_size": Reader(_VLLM_CONFIG, r"with config: .*?\btensor_parallel_size=(\d+)",
                                       _VLLM_CONFIG_SOURCE.format(1684)),
        "pipeline_parallel_size": Reader(_VLLM_CONFIG, r"with config: .*?\bpipeline_parallel_size=(\d+)",
                                         _VLLM_CONFIG_SOURCE.format(1685)),
        # The config line says whether it was asked off; vllm/distributed/device_communicators/
        # custom_all_reduce.py:79-167 logs "Custom allreduce is disabled because ..." when vLLM turns it off itself.
        "custom_all_reduce": Reader("Custom allreduce is disabled",
                                    r"(?:disable_custom_all_reduce=(True|False)|(Custom allreduce is disabled))",
                                    "vllm/distributed/device_communicators/custom_all_reduce.py:79-167",
                                    also=_VLLM_CONFIG),
    },
    "sglang": {
        "moe_backend": Reader("moe_runner_backend=", r"\bmoe_runner_backend='(\w+)'",
                              _SGLANG_SOURCE.format("moe_runner_backend")),
        "attention_backend": Reader("attention_backend=", r"\battention_backend=(?:'(\w+)'|(None))",
                                    _SGLANG_SOURCE.format("attention_backend")),
        "quantization": Reader("quantization=", r"\bquantization=(?:'([\w-]+)'|(None))",
                               _SGLANG_SOURCE.format("quantization")),
        "kv_cache_dtype": Reader("kv_cache_dtype=", r"\bkv_cache_dtype='(\w+)'",
                                 _SGLANG_SOURCE.format("kv_cache_dtype")),
        # NEXTN is logged as EAGLE: sglang/srt/server_args.py:2983-2984 rewrites it before the log line.
        "speculative": Reader("speculative_algorithm=", r"\bspeculative_algorithm=(?:(None)|'(\w+)'.*?"
                                            r"\bspeculative_num_draft_tokens=(\d+|None))",
                              _SGLANG_SOURCE.format("speculative_algorithm, speculative_num_draft_tokens")),
        "tensor_parallel_size": Reader("tp_size=", r"\btp_size=(\d+)", _SGLANG_SOURCE.format("tp_size")),
        "custom_all_reduce": Reader("disable_custom_all_reduce=", r"\bdisable_custom_all_reduce=(True|False)",
                                    _SGLANG_SOURCE.format("disable_custom_all_reduce")),
    },
    "llama.cpp": {
        # llama.cpp's server as xllamacpp 2026.10.11549 embeds it, its lines as the sandbox's launcher logs them
        # (tests/fixtures/known-failures/llama-healthy-start.txt): its common threadpool init and the server's
        # load_model ("initializing, n_slots = 4, n_ctx_slot = 2048": context is per slot).
        "threads": Reader("threadpool init, n_threads", r"threadpool init, n_threads = (\d+)",
                          "llama.cpp common: llama threadpool init"),
        "context": Reader("n_ctx_slot", r"\bn_ctx_slot = (\d+)", "llama.cpp tools/server: load_model"),
        "slots": Reader("n_slots", r"initializing, n_slots = (\d+)", "llama.cpp tools/server: load_model"),
    },
}

#: What a value read means in a sentence (the config's flag turned into on/off, None into none).
_MEANINGS = {"custom_all_reduce": {"True": "off", "False": "on", "Custom allreduce is disabled": "off"}}


def _meaning(item: str, value: str) -> str:
    if value == "None":
        return "none"
    return _MEANINGS.get(item, {}).get(value, value)


def startup_needles(kind: str) -> list[str]:
    """The fixed strings the start-up lines of an engine of ``kind`` hold, each once (for ``grep -F``)."""
    readers = READERS.get(kind, {}).values()
    return sorted({reader.needle for reader in readers} | {reader.also for reader in readers if reader.also})


def startup_report(kind: str, lines: Iterable[str]) -> dict[str, list[str]]:
    """What the engine reported for each item it logged, each distinct value once, oldest first (pure).

    A worker that fell back shows a second value beside the others'. Custom all-reduce is off once any line says
    so: vLLM turns it off itself after its config line said on.

    + kind: the engine's kind (``vllm``, ``sglang``, ``llama.cpp``)
    + lines: its start-up lines, oldest first
    """
    report: dict[str, list[str]] = {}
    for line in lines:
        for item, reader in READERS.get(kind, {}).items():
            value = reader.read(line) if reader.holds_needle(line) else None
            if value is not None and _meaning(item, value) not in report.setdefault(item, []):
                report[item].append(_meaning(item, value))
    if "off" in report.get("custom_all_reduce", []):
        report["custom_all_reduce"] = ["off"]
    return {item: values for item, values in report.items() if values}


def startup_mismatches(kind: str, expected: Mapping[str, str], lines: Iterable[str]) -> list[str]:
    """Each promised item the engine did not report as promised, in words (pure): "runs X, not Y" where it chose
    otherwise, "did not report its X" where no line said.

    + kind: the engine's kind
    + expected: the recipe's ``startup`` declaration (item -> value)
    + lines: the engine's start-up lines

    >>> line = "INFO [nvfp4.py:226] Using 'VLLM_CUTLASS' NvFp4 MoE backend out of potential backends: ['MARLIN']."
    >>> startup_mismatches("vllm", {"moe_backend": "MARLIN"}, [line])  # doctest: +NORMALIZE_WHITESPACE
    ['runs MoE backend VLLM_CUTLASS, not MARLIN
      (vllm/model_executor/layers/fused_moe/oracle/nvfp4.py:189, 226, 256)']
    """
    report = startup_report(kind, list(lines))
    problems = []
    for item, want in expected.items():
        reader = READERS.get(kind, {}).get(item)
        name = ITEM_NAMES.get(item, item)
        if reader is None:
            problems.append(f"{kind} reports no {name} at start: rigforge cannot check it")
        elif item not in report:
            problems.append(f"did not report its {name} (expected {want}; {reader.source} logs it)")
        elif report[item] != [want]:
            chose = " and ".join(value for value in report[item] if value != want)
            problems.append(f"runs {name} {chose}, not {want} ({reader.source})")
    return problems


def recorded_lines(record: str, invocation: str) -> list[str] | None:
    """The start-up lines of a record the health wait wrote for the unit's ``invocation``; None when the record
    is of another start (or missing: ``record`` empty), so it says nothing about the engine running now (pure).

    >>> recorded_lines("# invocation ab12\\nINFO n_slots = 4\\n", "ab12")
    ['INFO n_slots = 4']
    >>> recorded_lines("# invocation ab12\\n", "cd34") is None
    True
    """
    head, _, body = record.partition("\n")
    if not invocation or head != f"# invocation {invocation}":
        return None
    return [line for line in body.splitlines() if line.strip()]


def startup_verdict(kind: str, expected: Mapping[str, str], record: str, invocation: str) -> list[str]:
    """What is wrong with the engine's start-up report for a recipe promising ``expected`` (pure): its
    mismatches, or that no record of its current start exists. Empty: it runs what it says.

    + kind: the engine's kind
    + expected: the recipe's ``startup`` declaration
    + record: the text of ``STARTUP_RECORD`` on the rig ("" when missing)
    + invocation: the unit's current InvocationID
    """
    if not expected:
        return []
    lines = recorded_lines(record, invocation)
    if lines is None:
        return [f"no record of its start-up lines for the engine's current start ({STARTUP_RECORD}: the health "
                "wait writes it once the engine answers)"]
    return startup_mismatches(kind, expected, lines)
