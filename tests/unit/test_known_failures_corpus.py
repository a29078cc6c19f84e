"""No false alarms, and the signatures catch more than their own examples.

The harmless corpus is real output only: a sandbox host's own journal (tests/fixtures/known-failures/harmless/
sandbox-journal.txt, captured from a fresh sandbox host with ``journalctl -b``), the lent GPU machine's kernel log
(gpu-machine/dmesg.txt), the NCCL runs that worked (tests/fixtures/nccl/), the sandbox engine's healthy start, and
driver, NCCL, vLLM and SGLang lines quoted in public threads (harmless/public-lines.txt, a source above each
block). No signature may match any of its lines, in any log.

``VARIANTS`` are real failure lines from public threads that are not any signature's example: each must give
its signature (other PCI addresses, versions, timestamps and wording than the examples).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rigforge.known_failures import known_signatures, match_lines, signature_data
from rigforge.known_failures.match import unrecognised_hit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HARMLESS = FIXTURES / "known-failures" / "harmless"
ALL = signature_data()
PLACES = ("kernel", "engine", "startup", "bench")
#: The classes the issue lists, by id prefix or id: each must have a signature (docs/troubleshooting.md's table).
URL = re.compile(r"https?://\S+")


def public_lines() -> list[tuple[str, str]]:
    """(line, source URL) of harmless/public-lines.txt: a ``# source: URL`` line names the lines after it."""
    source, found = "", []
    for line in (HARMLESS / "public-lines.txt").read_text().splitlines():
        if line.startswith("# source: "):
            source = line.removeprefix("# source: ")
        elif line.strip() and not line.startswith("# "):
            assert URL.match(source), f"{line!r} has no source above it"
            found.append((line, source))
    return found


def corpus() -> list[str]:
    """Every harmless line, one per entry."""
    files = [HARMLESS / "sandbox-journal.txt", FIXTURES / "known-failures" / "gpu-machine" / "dmesg.txt",
             FIXTURES / "known-failures" / "llama-healthy-start.txt",
             FIXTURES / "nccl" / "a-no-graph.log", FIXTURES / "nccl" / "d-graph-1gpu.log"]
    lines = [line for path in files for line in path.read_text().splitlines() if line.strip()]
    return lines + [line for line, _ in public_lines()]


def matched_ids(lines: list[str]) -> set[str]:
    return {hit.id for where in PLACES for hit in match_lines(ALL, lines, where)}


def test_the_corpus_is_large_and_of_every_kind() -> None:
    lines = corpus()
    assert len(lines) >= 300, len(lines)
    assert sum("NCCL INFO" in line for line in lines) >= 300
    assert sum("NVRM:" in line for line in lines) >= 10
    engines = [line for line, source in public_lines() if "/vllm-project/" in source or "/sgl-project/" in source]
    assert len(engines) >= 50, len(engines)


def test_no_signature_matches_a_harmless_line() -> None:
    offenders = {line: sorted(matched_ids([line])) for line in corpus() if matched_ids([line])}
    assert offenders == {}


def test_no_signature_matches_the_corpus_as_one_log() -> None:
    assert matched_ids(corpus()) == set()


def test_the_corpus_holds_no_unrecognised_error_line() -> None:
    """Healthy logs say nothing at error level: the unrecognised row stays quiet on them, in every log."""
    lines = corpus()
    assert [unrecognised_hit(ALL, lines, where) for where in ("kernel", "engine", "startup")] == [None, None, None]


#: Real failure lines that are no signature's example -> the signature each must give (source beside each).
VARIANTS = [
    # https://github.com/leptonai/gpud/pull/500
    ("NVRM: Xid (PCI:0000:9b:00): 119, pid=4071838, name=python, Timeout after 45s of waiting for RPC response "
     "from GPU4 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20801702 0x4).", "xid-gsp-halted"),
    # https://plexus.company/guides/gpu-xid-errors/119
    ("NVRM: Xid (PCI:0000:65:00): 119, pid='N/A', Timeout waiting for RPC from GSP", "xid-gsp-halted"),
    # https://github.com/NVIDIA/gpu-operator/issues/649
    ("[ 1097.650222] NVRM: GPU 0000:04:01.0: RmInitAdapter failed! (0x11:0x45:2525)", "nvidia-gpu-init-failed"),
    # https://github.com/NVIDIA/open-gpu-kernel-modules/issues/789
    ("[  903.609564] NVRM: RmInitAdapter: Cannot initialize GSP firmware RM", "nvidia-gpu-init-failed"),
    # https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1151
    ("May 27 16:50:10 fedora kernel: NVRM: GPU 0000:09:00.0: RmInitAdapter failed! (0x22:0x56:894)",
     "nvidia-gpu-init-failed"),
    # https://github.com/NVIDIA/nvidia-docker/issues/182
    ("Aug 26 14:08:07 nyasara-linux kernel: NVRM: API mismatch: the client has the version 367.44, but",
     "nvrm-api-mismatch"),
    # https://github.com/NVIDIA/open-gpu-kernel-modules/issues/829
    ("Apr 19 12:34:42 Kyrios kernel: NVRM: API mismatch: the client 'nvidia-powerd' (pid 849)", "nvrm-api-mismatch"),
    # https://github.com/rajeshroy402/DeepStream-dGPU-Installation/issues/5
    ("Failed to initialize NVML: Driver/Library version mismatch", "driver-library-version-mismatch"),
    # https://github.com/lllyasviel/Omost/issues/120
    ("RuntimeError: The NVIDIA driver on your system is too old (found version 11060). Please update your GPU "
     "driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx "
     "Alternatively, go to: https://pytorch.org to install a PyTorch version that has been compiled with your "
     "version of the CUDA driver.", "image-cuda-newer-than-driver"),
    # https://github.com/NVIDIA/CUDALibrarySamples/issues/47
    ("Error: the provided PTX was compiled with an unsupported toolchain.", "ptx-newer-than-driver"),
    # https://github.com/NVlabs/BundleSDF/issues/184
    ('Error response from daemon: could not select device driver "" with capabilities: [[gpu]].',
     "docker-gpus-without-nvidia-runtime"),
    # https://github.com/NVIDIA/nvidia-container-toolkit/issues/434 (its title)
    ("Rootless Docker CDI Injection: error modifying OCI spec: failed to inject CDI devices: unresolvable CDI "
     "devices nvidia.com/gpu=all: unknown.", "cdi-spec-stale"),
    # https://github.com/hiyouga/LlamaFactory/issues/7396
    ("[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
     "timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) "
     "ran for 600060 milliseconds before timing out.", "nccl-collective-timeout"),
    # https://github.com/hiyouga/LlamaFactory/issues/6269
    ("[rank0]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
     "timeout: WorkNCCL(SeqNum=7753, OpType=_REDUCE_SCATTER_BASE, NumelIn=544997376, NumelOut=68124672, "
     "Timeout(ms)=600000) ran for 600061 milliseconds before timing out.", "nccl-collective-timeout"),
    # https://github.com/src-d/kmcuda/issues/80
    ("warning: failed to enable p2p on gpu #0: peer access is not supported between these two devices",
     "nccl-peer-access-refused"),
    # https://github.com/vllm-project/vllm/pull/31338
    ("ptxas fatal: Value 'sm_110a' is not defined for option 'gpu-name'", "triton-ptxas-failed"),
    # https://github.com/triton-lang/triton/issues/8539
    ("riton.runtime.errors.PTXASError: PTXAS error: Internal Triton PTX codegen error", "triton-ptxas-failed"),
    # https://github.com/rendeirolab/LazySlide/issues/52
    ("GatedRepoError: 401 Client Error. (Request ID: Root=1-6800c1a8-69511c6166fc8c3076cf474d;"
     "b91c310c-e96a-4855-88a6-1d10b06d8e80)", "hf-gated-or-unauthorised"),
    # https://github.com/huggingface/transformers/pull/28894
    ("Access to model baseten/docs-example-gated-model is restricted and you are not in the authorized list. "
     "Visit https://huggingface.co/baseten/docs-example-gated-model to ask for access.", "hf-gated-or-unauthorised"),
    ("Repo model nvidia/nemotron-3-8b-base-4k is gated. You must be authenticated to access it.",
     "hf-gated-or-unauthorised"),
    # https://github.com/doitsujin/dxvk/issues/1027
    ("[31543.449443] NVRM: Xid (PCI:0000:01:00): 31, Ch 0000003a, intr 10000000. MMU Fault: ENGINE GRAPHICS "
     "GPCCLIENT_T1_3 faulted @ 0x17_00592000. Fault is of type FAULT_PDE ACCESS_TYPE_READ", "xid-31-mmu-fault"),
    # https://github.com/ggml-org/llama.cpp/issues/23811
    ("[ 1204.123584] NVRM: Xid (PCI:0000:01:00): 13, Graphics SM Warp Exception on (GPC 2, TPC 0, SM 0): Illegal "
     "Instruction Encoding", "xid-13-graphics-exception"),
    # https://github.com/vllm-project/vllm/issues/5901
    ("[93297.027938] NVRM: Xid (PCI:0000:43:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: ESR "
     "0x52e7b0=0x101000e 0x52e7b4=0x4 0x52e7a8=0xc81eb60 0x52e7ac=0x1174", "xid-13-graphics-exception"),
    # https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1150
    ("kernel: NVRM: Xid (PCI:0000:ed:00): 45, pid=1818992, name=python3, Ch 0000000c caused by previous Xid 145",
     "xid-45-preemptive-cleanup"),
    # https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1125
    ("[37803.140477] NVRM: _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs 3856513292 heartbeat 0 "
     "heartbeatWithOffsetMs 0 diff 3856513292 timeout 5200", "gsp-heartbeat-lost"),
    # https://github.com/InternLM/lmdeploy/issues/263
    ("W0816 16:43:33.649654 127 pinned_memory_manager.cc:236] Unable to allocate pinned system memory, pinned memory "
     "pool will not be available: CUDA driver version is insufficient for CUDA runtime version",
     "image-cuda-newer-than-driver"),
    # https://github.com/mlcommons/inference/issues/54
    ("RuntimeError: cuda runtime error (35) : CUDA driver version is insufficient for CUDA runtime version at "
     "/pytorch/torch/csrc/cuda/Module.cpp:34", "image-cuda-newer-than-driver"),
    # https://github.com/maybleMyers/H1111/issues/23
    ("SUBPROCESS: RuntimeError: CUDA error: out of memory", "cuda-oom-at-start"),
    # https://github.com/RangiLyu/nanodet/issues/216 (its title)
    ("RuntimeError: The NVIDIA driver on your system is too old (found version 10010). Please update you",
     "image-cuda-newer-than-driver"),
]


@pytest.mark.parametrize(("line", "expected"), VARIANTS, ids=[expected for _, expected in VARIANTS])
def test_a_real_variant_gives_its_signature(line: str, expected: str) -> None:
    assert matched_ids([line]) == {expected}


def test_the_variants_are_not_examples() -> None:
    examples = {line for signature in known_signatures() for line in signature.examples}
    assert not examples & {line for line, _ in VARIANTS}


def test_every_public_signature_quotes_its_source() -> None:
    """A signature whose lines come from public threads names them: a URL in its source."""
    local = ("rig-facts", "tests/fixtures", "captured:", "the bench's")
    for signature in known_signatures():
        if not any(marker in signature.source for marker in local):
            assert URL.search(signature.source), signature.id


def test_the_coverage_table_names_every_signature() -> None:
    """docs/troubleshooting.md's table by failure class: every signature is in it (``nccl-graph-*`` for a family)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md").read_text()
    table = text[text.index("### What the doctor knows, by failure class"):text.index("What it does not know")]
    named = set(re.findall(r"`([a-z0-9-]+)`", table))
    families = re.findall(r"`([a-z0-9-]+)\*`", table)
    missing = [s.id for s in known_signatures() if s.id not in named and not s.id.startswith(tuple(families))]
    assert missing == []
