"""Known-failure signatures: each on its real line, none on a line that merely resembles one, a file that
says what is wrong with it, and the health wait's inlined matcher on a real captured journal."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from rigforge.known_failures import (
    KnownFailureError,
    hit_line,
    known_signatures,
    load_signatures,
    match_lines,
    signature_data,
)
from rigforge.known_failures.schema import SIGNATURES_FILE
from rigforge.profile.loader import load_profile
from roles.service import render_wait_script

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "known-failures"
ALL = signature_data()

#: rig-facts §9 rows whose symptom is a log line rig-facts quotes (the others: the YAML header says why not).
LOGGED_ROWS = {1, 2, 7, 9, 11, 14, 15, 17, 18, 19, 22, 24, 27, 28, 29}

#: Lines that resemble a signature's and must match none: an Xid no catalog entry applies to, harmless warnings,
#: normal output.
NEAR_MISSES = [
    "NVRM: Xid (PCI:0000:41:00): 7, pid=2210",
    "NVRM: Xid (PCI:0000:41:00): 790, pid=2210",
    "NVRM: Xid (PCI:0000:41:00): 1190, pid=2210",
    "pcieport 0000:00:01.1: AER: Corrected error received: 0000:01:00.0",
    "aer_uncor_status: 0x00000000, aer_uncor_mask: 0x00100000",
    "aer_uncor_status: 0x000000200",
    "AMD-Vi: Interrupt remapping enabled",
    "vLLM is using nccl==2.28.9",
    "NCCL INFO Failed to CUDA calloc retry ok",
    "RuntimeError: invalid argument",
    "pcie_allreduce.cu:3210",
    "CUDA error: an illegal instruction was encountered",
    "torch.OutOfMemoryError: out of memory on CPU",
    "Config file not found at /configs/foo.json, using default config",
    "using fastsafetensors loader",
    "W srv          init: security: no API key is set and CORS allows all origins",
    "gguf_init_from_file: loaded meta data with 38 key-value pairs and 236 tensors from model.gguf",
    "srv    start: HTTP server is listening, hostname: 127.0.0.1, port: 8080",
    "ValueError: value too large",
    "probe chat_template: ok the served template renders '<start_of_turn>user\\nHi<end_of_turn>\\n<start_of_turn>"
    "model\\n'; its turn markers <start_of_turn>, <end_of_turn> are each one token of the model",
    "probe chat_capital_thinking_on: FAILED chat_reasoning: thinking on, but no reasoning came back in "
    "reasoning_content or reasoning (the engine runs a reasoning parser: is it the model's?)",
    "probe chat_capital: FAILED chat_answer: 'What is the capital of France? Answer in one word.' -> 'Lyon.'",
    # another site's 401, not the Hub's (https://github.com/okpy/ok-client/issues/452,
    # https://github.com/merll/docker-registry-util/issues/4): errors of other programs, so not in the harmless corpus
    "`HTTPError: 401 Client Error: UNAUTHORIZED for url: https://okpy.org/api/v3/backups/?client_name=ok-client&client-"
    "version=v1.18.1`",
    "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url:",
    # another driver's device faulting in the IOMMU (https://github.com/pop-os/pop/issues/853,
    # https://github.com/Dasharo/dasharo-issues/issues/1134, https://github.com/clearlinux/distribution/issues/392): not
    # iommu-io-page-fault's; error lines of another device, so not in the harmless corpus (each is unrecognised, below)
    "[   10.919607] nvme 0000:01:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0000 address=0xfc189000 "
    "flags=0x0000]",
    "[   40.182570] ath10k_pci 0000:01:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000d address=0xcff49550 "
    "flags=0x0070]",
    "[  486.617672] nvme 0000:41:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0000 address=0xf7936000 "
    "flags=0x0000]",
    # Xid 1540 is no catalog code: the word boundary keeps it apart from 154
    "NVRM: Xid (PCI:0000:41:00): 1540, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
]

#: Captured failure output -> the one signature it must give.
CAPTURES = {
    "llama-model-file-missing.txt": "llama-model-file-missing",
    "llama-model-file-corrupt.txt": "llama-model-file-corrupt",
    "llama-port-in-use.txt": "llama-port-in-use",
    "llama-flag-out-of-range.txt": "llama-flag-out-of-range",
    "llama-launcher-unknown-flag.txt": "llama-launcher-unknown-flag",
    "bench-chat-template-chatml.txt": "chat-template-not-the-models",
    "docker-gpus-without-nvidia-runtime.txt": "docker-gpus-without-nvidia-runtime",
}


def matched_ids(lines: list[str], hung: bool = False) -> list[str]:
    """Ids found in ``lines`` in any place (kernel, engine, startup, bench), each once."""
    found: dict[str, None] = {}
    for where in ("kernel", "engine", "startup", "bench"):
        for hit in match_lines(ALL, lines, where, hung=hung):
            found[hit.id] = None
    return list(found)


@pytest.mark.parametrize("signature", known_signatures(), ids=lambda signature: signature.id)
def test_each_quoted_line_gives_its_signature_and_no_other(signature) -> None:
    for line in signature.examples:
        assert matched_ids([line], hung=signature.hang_only) == [signature.id], line


@pytest.mark.parametrize("line", NEAR_MISSES)
def test_a_line_that_merely_resembles_one_matches_nothing(line: str) -> None:
    assert matched_ids([line]) == []


def test_every_logged_rig_facts_row_has_a_signature() -> None:
    cited: set[int] = set()
    for signature in known_signatures():
        for rows in re.findall(r"§9 rows? ([\d, and-]+)", signature.source):
            for first, last in re.findall(r"(\d+)(?:-(\d+))?", rows):
                cited.update(range(int(first), int(last or first) + 1))
    assert cited >= LOGGED_ROWS, sorted(LOGGED_ROWS - cited)


def test_a_hang_line_counts_only_as_the_last_line_of_a_hung_start() -> None:
    lines = ["INFO vLLM is using nccl==2.28.9", "INFO loading weights"]
    assert matched_ids(lines, hung=True) == []
    assert matched_ids(lines[:1], hung=True) == ["nccl-init-hang"]
    assert matched_ids(lines[:1], hung=False) == []


@pytest.mark.parametrize(("capture", "expected"), sorted(CAPTURES.items()))
def test_real_llama_cpp_failure_output_gives_exactly_its_signature(capture: str, expected: str) -> None:
    lines = (FIXTURES / capture).read_text().splitlines()
    assert matched_ids(lines) == [expected]


def test_a_real_healthy_start_matches_nothing() -> None:
    assert matched_ids((FIXTURES / "llama-healthy-start.txt").read_text().splitlines()) == []


def test_kernel_signatures_are_not_looked_for_in_the_engine_journal() -> None:
    xid = "NVRM: Xid (PCI:0000:41:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    assert [hit.id for hit in match_lines(ALL, [xid], "kernel")] == ["xid-79-fallen-off-bus"]
    assert match_lines(ALL, [xid], "startup") == []


def _write(tmp_path: Path, entry: str) -> Path:
    path = tmp_path / "known-failures.yaml"
    path.write_text("signatures:\n" + entry)
    return path


GOOD = """  - id: good-one
    where: [startup]
    needle: "boom"
    pattern: 'boom \\d+'
    severity: fail
    cause: "c"
    fix: "f"
    source: "s"
    examples: ["boom 1"]
"""


@pytest.mark.parametrize(("change", "message"), [
    (("'boom \\d+'", "'boom (\\d+'"), "entry 2 (bad-one): pattern: 'boom (\\\\d+' does not compile: missing ), "
                                       "unterminated subpattern at position 5"),
    (('["boom 1"]', '["bam 1"]'), "entry 2 (bad-one): examples: 'bam 1' does not hold needle 'boom' "
                                  "and match pattern 'boom \\\\d+'"),
    (("severity: fail", "severity: fatal"), "entry 2 (bad-one): severity: Input should be 'blocking', 'fail' or 'warn' "
                                           "(got 'fatal')"),
    (('    source: "s"\n', ""), "entry 2 (bad-one): source: Field required"),
    (("    fix:", "    profile_fields: [engine.prot]\n    fix:"),
     "entry 2 (bad-one): profile_fields: 'engine.prot' is not a profile setting"),
    (("    fix:", "    colour: red\n    fix:"),
     "entry 2 (bad-one): colour: Extra inputs are not permitted (got 'red')"),
    (("bad-one", "good-one"), "entry 2 (good-one): id: used twice"),
])
def test_a_bad_entry_names_file_entry_and_field(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    bad = GOOD.replace("good-one", "bad-one").replace(*change)
    with pytest.raises(KnownFailureError) as error:
        load_signatures(_write(tmp_path, GOOD + bad))
    assert str(error.value).endswith(message), str(error.value)
    assert str(error.value).startswith(str(tmp_path / "known-failures.yaml"))


def test_the_project_file_loads() -> None:
    assert load_signatures(SIGNATURES_FILE) == known_signatures()


def test_the_health_wait_names_the_failure_in_a_real_journal(tmp_path: Path) -> None:
    """The rendered wait script's inlined matcher (run with python3, as on the rig) on captured output."""
    script = render_wait_script(load_profile("sandbox"))
    program = script.split("<<'RIGFORGE_KNOWN_FAILURES'\n", 1)[1].split("\nRIGFORGE_KNOWN_FAILURES\n", 1)[0]
    journal = FIXTURES / "llama-port-in-use.txt"
    run = subprocess.run(["python3", "-", str(journal)], input=program, capture_output=True, text=True, check=True)
    port = next(s for s in known_signatures() if s.id == "llama-port-in-use")
    expected = hit_line(match_lines([port.as_data()], ["couldn't bind HTTP server socket, hostname: h, port: 1"],
                                    "startup")[0])
    assert run.stdout.splitlines() == [expected]


def test_a_real_xid_free_kernel_log_and_nvidia_smi_errors_match_nothing() -> None:
    """Captured on the lent GPU machine (tests/fixtures/known-failures/README.md): NVRM lines, but no Xid."""
    machine = FIXTURES / "gpu-machine"
    dmesg = (machine / "dmesg.txt").read_text().splitlines()
    assert len(dmesg) == 358 and sum("NVRM:" in line for line in dmesg) == 3
    for name in ("dmesg.txt", "nvidia-smi-bad-index.txt", "nvidia-smi-bad-field.txt"):
        assert matched_ids((machine / name).read_text().splitlines()) == [], name
    assert (machine / "fact-KnownFailureLogs-kernel-part.txt").read_text() == "## kernel\n## engine\nexit status: 0\n"


def test_the_health_wait_names_the_missing_container_runtime_with_the_container_deploy() -> None:
    """Docker's real answer to --gpus without NVIDIA's runtime, as the engine unit's journal holds it."""
    script = render_wait_script(load_profile("sandbox"))
    program = script.split("<<'RIGFORGE_KNOWN_FAILURES'\n", 1)[1].split("\nRIGFORGE_KNOWN_FAILURES\n", 1)[0]
    journal = FIXTURES / "docker-gpus-without-nvidia-runtime.txt"
    run = subprocess.run(["python3", "-", str(journal)], input=program, capture_output=True, text=True, check=True)
    assert len(run.stdout.splitlines()) == 1
    assert run.stdout.startswith("known failure docker-gpus-without-nvidia-runtime (fail): Docker was asked for GPUs")
    assert "fix: run deploys/images.py" in run.stdout


#: Real lines at error level that no signature names (their sources beside them): each is an unrecognised error line.
UNRECOGNISED_LINES = [
    # a vLLM worker's ERROR no signature knows: https://github.com/vllm-project/vllm/issues/32109
    ("engine", "(EngineCore_DP0 pid=187525) ERROR 01-10 22:23:50 [core.py:936]     available_gpu_memory = "
               "self.model_executor.determine_available_memory()"),
    # another device's IOMMU fault (the near misses above): an error line, no known failure
    ("kernel", "[   10.919607] nvme 0000:01:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0000 address=0xfc189000 "
               "flags=0x0000]"),
    # https://github.com/ameli/manylinux-cuda/issues/5
    ("engine", "docker: Error response from daemon: failed to create task for container: failed to create shim task: "
               "OCI runtime create failed: runc create failed: unable to start container process: error during "
               "container init: error running hook #0: error running hook: exit status 1, stdout: , stderr: "
               "Auto-detected mode as 'legacy'"),
    # https://github.com/NVIDIA/open-gpu-kernel-modules/issues/673: an older driver's assertion (NVRM without a colon)
    ("kernel", "[ 1731.589314] NVRM nvAssertFailedNoLog: Assertion failed: status == NV_OK @ kernel_gsp_ga102.c:235"),
    # an Xid the catalog has and no signature names: https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/904
    ("kernel", "[1231741.378609] NVRM: Xid (PCI:0009:01:00): 43, pid=3188489, name=trigger_xid, channel 0x0b00000a"),
]


@pytest.mark.parametrize(("where", "line"), UNRECOGNISED_LINES)
def test_an_error_line_no_signature_names_is_unrecognised(where: str, line: str) -> None:
    from rigforge.known_failures.match import unrecognised_hit

    assert matched_ids([line]) == []
    hit = unrecognised_hit(ALL, ["a harmless line before it", line], where)
    assert hit is not None and (hit.id, hit.severity, hit.count, hit.line) == (
        "unrecognised-error-lines", "unrecognised", 1, line.strip()[:240])
