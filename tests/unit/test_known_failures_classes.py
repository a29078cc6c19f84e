"""The right signature, not just some signature: every real line names the class it must give, and no other
signature of a higher severity claims it; rig-facts' own lines recognised; error lines no class knows counted for
the monitoring collector; a unit's failed result never hides the line that says why.

Real lines: each signature's examples (inventory/known-failures.yaml), both held-out sets
(tests/fixtures/known-failures/heldout/), the corpus's variants and the lines rig-facts quotes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rigforge.checks.known_failures import find_known_failures
from rigforge.facts.logs import FailureLogs
from rigforge.known_failures import Hit, known_signatures, match_lines, signature_data
from rigforge.known_failures.match import unrecognised_counts
from rigforge.remote import journal_health
from tests.unit.test_known_failures_corpus import VARIANTS, corpus, public_lines
from tests.unit.test_known_failures_heldout import FORMAT_SPLIT, HELDOUT, heldout_lines

ALL = signature_data()
PLACES = ("kernel", "engine", "startup", "bench")
RANK = {"warn": 1, "fail": 2, "blocking": 3}

#: Every log line /work/shared/reference/rig-facts.md quotes (§1, §4, §5, §8, §9), with the signature it gives.
RIG_FACTS_LINES = [
    ("IO_PAGE_FAULT", "iommu-io-page-fault"),                                        # §9 row 2, §4
    ("aer_uncor_status: 0x00000020", "aer-surprise-link-down"),                      # §9 row 9, §1
    ("Surprise Link Down", "aer-surprise-link-down"),                                # §1
    ("NCCL error: Failed to CUDA calloc 10485760 bytes", "nccl-calloc-failed"),      # §9 row 7
    ("Failed to CUDA calloc 10485760 bytes", "nccl-calloc-failed"),                  # §5
    ("vLLM is using nccl==2.28.9", "nccl-init-hang"),                                # §9 row 1 (the hang's last line)
    ("RuntimeError: invalid argument at pcie_allreduce.cu:321", "pcie-allreduce-expandable-segments"),  # §9 row 11
    ("AttributeError: 'ImportError' object has no attribute 'get_num_sms'", "deepgemm-on-sm120"),      # §9 row 15
    ("probability tensor contains either inf, nan or element < 0", "fp4-gemm-nan"),  # §9 row 17, §8
    ("eagle_worker_v2.py:510", "eagle-worker-device-assert"),                        # §9 row 17
    ("RuntimeError: ... attention.hpp:159: Unsupported architecture", "nsa-unsupported-architecture"),  # §9 row 18
    ("CUDA error: an illegal memory access", "cuda-illegal-memory-access"),          # §9 row 19
    ("all spec tokens rejected: [-1,...]", "spec-tokens-all-rejected"),              # §9 row 19
    ("Config file not found ... E=257,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition.json",
     "triton-moe-config-missing"),                                                  # §9 row 24
    ("max_num_seqs exceeds available Mamba cache blocks", "mamba-cache-blocks"),     # §9 row 27
    ("CUBLAS_STATUS_NOT_INITIALIZED", "cublas-not-initialized"),                     # §9 row 29
    ("Failed to initialize cutlass TMA WS grouped gemm", "moe-tile-fallback"),       # §6
    ("NVMLError_Unknown", "nvml-error"),                                             # §2 (memory overclock)
]

#: Lines of the same programs that are no failure (their sources in harmless/public-lines.txt where quoted there):
#: each matches no signature.
NEAR_MISSES = [
    "pcieport 0000:00:03.1: AER: Correctable error message received from 0000:00:00.0",
    "pcieport 0000:00:1c.5: PCIe Bus Error: severity=Corrected, type=Physical Layer, id=00e5(Receiver ID)",
    "pcieport 0000:00:01.0: AER: enabled with IRQ 27",
    "pcieport 0000:00:01.1: DPC: enabled with IRQ 28",
    "pcieport 0000:00:03.0: AER: device recovery successful",
    "Kernel is locked down from Kernel configuration; see man kernel_lockdown.7",
    "nvidia: module verification failed: signature and/or required key missing - tainting kernel",
    "Building module:",
    "Cleaning build area... done.",
    "DKMS: install completed.",
    "Running module version sanity check.",
    "systemd[1]: Starting nvidia-persistenced.service - NVIDIA Persistence Daemon...",
    "systemd[1]: docker.service: Scheduled restart job, restart counter is at 3.",
    "systemd[1]: rigforge-engine.service: Main process exited, code=killed, status=15/TERM",
    "systemd[1]: rigforge-engine.service: Deactivated successfully.",
    "ERROR: Failed to start the HTTP server",
    "INFO 08-13 11:27:02 [core.py:193] init engine (profile, create kv cache, warmup model) took 124.16 seconds",
    "NVMLError_NotSupported: Not Supported",
    "ptxas info    : Used 128 registers, 400 bytes cmem[0]",
    "TMA Desc Addr:   0x7ffc2880b500",
    "gpu2-ru7:2144:2556 [2] NCCL INFO Ring 00 : 2[3d000] -> 3[3e000] via direct shared memory",
    "NCCL INFO NCCL_SHM_DISABLE set by environment to 0.",
    "modprobe: WARNING: Module nvidia_uvm not found in directory /lib/modules/6.8.0-45-generic",
    "nvcc warning : Support for offline compilation for architectures prior to '<compute/sm/lto>_75' will be removed",
    "{1}[Hardware Error]:  aer_cor_status: 0x00001000, aer_cor_mask: 0x00002000",
    "aer_uncor_status: 0x00000000, aer_uncor_mask: 0x00100000",
    "pcieport 0000:00:03.1:    [ 7] BadDLLP               ",
    "systemd[1]: Dependency failed",
    "WARNING 01-01 00:00:00 [shm_broadcast.py:1] No available shared memory broadcast block found",
]


def real_lines() -> list[tuple[str, str]]:
    """(line, the signature it must give) for every real line the project holds."""
    rows = [(line, signature.id) for signature in known_signatures() for line in signature.examples]
    rows += [(line, expected) for path in (HELDOUT, FORMAT_SPLIT) for expected, _, line in heldout_lines(path)]
    return rows + [(line, expected) for line, expected in VARIANTS] + RIG_FACTS_LINES


def hits_of(line: str) -> dict[str, Hit]:
    """Every signature that claims ``line`` in any log, tried as the last line of a hung start too."""
    return {hit.id: hit for where in PLACES for hit in match_lines(ALL, [line], where, hung=True)}


def test_no_signature_of_a_higher_severity_claims_another_class_line() -> None:
    severity = {signature.id: signature.severity for signature in known_signatures()}
    wrong = []
    for line, expected in real_lines():
        hits = hits_of(line)
        own = hits[expected].severity if expected in hits else severity[expected]
        wrong += [(line, expected, other.id) for other in hits.values()
                  if other.id != expected and RANK[other.severity] > RANK[own]]
    assert wrong == []


def test_the_real_lines_are_many_and_of_every_class() -> None:
    rows = real_lines()
    assert len(rows) >= 400
    docs = (Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md").read_text()
    assert f"the lines rig-facts quotes, {len(rows)} lines)" in docs
    assert f"{len(corpus())} real harmless lines" in docs and f"and {len(public_lines())} driver, NCCL" in docs
    assert {expected for _, expected in rows} == {signature.id for signature in known_signatures()}


def test_a_dev_shm_no_space_line_is_shared_memory_not_an_nccl_warning() -> None:
    line = ("[2026-04-22 21:34:20] runner:202016:202235 [0] misc/shmutils.cc:132 NCCL WARN Error while creating "
            "shared memory segment /dev/shm/nccl-WU88OE (size 9637888), error: No space left on device (28)")
    assert set(hits_of(line)) == {"shm-too-small"}


@pytest.mark.parametrize(("line", "expected"), RIG_FACTS_LINES, ids=[expected for _, expected in RIG_FACTS_LINES])
def test_every_line_rig_facts_quotes_is_recognised(line: str, expected: str) -> None:
    assert set(hits_of(line)) == {expected}


@pytest.mark.parametrize(("line", "expected", "fix_names"), [
    ("IO_PAGE_FAULT", "iommu-io-page-fault", "iommu=pt"),
    ("AMD-Vi: Event logged [IO_PAGE_FAULT device=41:00.0 domain=0x000e address=0x00000000fdf8a000 flags=0x0020]",
     "iommu-io-page-fault", "iommu=pt"),
    ("pcieport 0000:00:01.1: AER: Uncorrected (Fatal) error received: 0000:00:01.1", "aer-uncorrectable",
     "pcie_port_pm=off"),
    ("pcieport 0000:00:01.1:    [ 5] Surprise Down Error    (First)", "aer-surprise-link-down", "pcie_port_pm=off"),
])
def test_rig_facts_plain_forms_point_at_rig_facts_fix(line: str, expected: str, fix_names: str) -> None:
    """The plain AMD-Vi fault (no driver named, the format before Linux 5.4) and a root port's fatal AER error with
    its Surprise Down bit, each with the rig-facts fix (iommu=pt; pcie_aspm=off pcie_port_pm=off)."""
    hits = hits_of(line)
    assert set(hits) == {expected} and fix_names in hits[expected].fix
    assert hits[expected].severity == ("fail" if expected == "iommu-io-page-fault" else "blocking")


def test_a_non_fatal_aer_error_fails_and_a_fatal_one_blocks() -> None:
    non_fatal = "pcieport 0000:80:1b.4: AER: Uncorrectable (Non-Fatal) error message received from 0000:80:1b.4"
    assert hits_of(non_fatal)["aer-uncorrectable"].severity == "fail"
    assert hits_of(non_fatal.replace("Non-Fatal", "Fatal"))["aer-uncorrectable"].severity == "blocking"


@pytest.mark.parametrize("line", NEAR_MISSES)
def test_a_harmless_line_of_the_same_program_matches_nothing(line: str) -> None:
    assert hits_of(line) == {}


def test_a_units_failed_result_does_not_hide_the_line_that_says_why() -> None:
    """systemd's "Failed with result" names a failure without its cause: the engine's unknown error line is shown
    beside it; when a known failure gives the cause, that row alone (the e2e doctor table: the missing model, not
    the unit that exited because of it)."""
    cause = "RuntimeError: something no signature knows"
    unit = "systemd[1]: rigforge-engine.service: Failed with result 'exit-code'."
    hits = find_known_failures(FailureLogs((), (cause, unit), ()))
    assert [(hit.id, hit.line) for hit in hits] == [("systemd-unit-failed", unit), ("unrecognised-error-lines", cause)]
    # a signature that names the cause explains the log: the unit's result is then no row of its own
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert [hit.id for hit in find_known_failures(FailureLogs((), (oom, cause, unit), ()))] == ["cuda-oom-at-start"]


def test_the_collector_counts_error_lines_no_signature_knows_by_log() -> None:
    """journal_health sums matcher.unrecognised_counts into rigforge_unrecognised_error_lines_total."""
    entries = [{"__CURSOR": "c1", "SYSLOG_IDENTIFIER": "kernel",
                "MESSAGE": "nvme 0000:01:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0000 address=0xfc189000 "
                           "flags=0x0000]"},
               {"__CURSOR": "c2", "SYSLOG_IDENTIFIER": "python", "MESSAGE": "RuntimeError: something new"},
               {"__CURSOR": "c3", "SYSLOG_IDENTIFIER": "python", "MESSAGE": "INFO: 127.0.0.1 - GET /health 200"},
               {"__CURSOR": "c4", "SYSLOG_IDENTIFIER": "python", "MESSAGE": "ERROR 01-01 00:00:00 [x.py:1] new"}]
    logs, _, _ = journal_health.parse_journal("\n".join(json.dumps(entry) for entry in entries), "rigforge-bench")
    assert unrecognised_counts(ALL, logs) == {"kernel": 1, "engine": 2}
    assert unrecognised_counts(ALL, {"kernel": [], "engine": ["INFO all well"]}) == {"kernel": 0, "engine": 0}
