"""The whole window, not its last lines: a failure at the start of a long journal is still named.

The fact's own shell command (``rigforge.facts.logs.KnownFailureLogs``: journalctl, grep -F on the needles and
the error words, the head-and-tail bound) runs here under sh with ``journalctl`` and ``systemctl`` standing in
(a fixture made only to feed the command a journal: they print a file), the output goes through the fact's
parser, the known-failures check and the doctor's table, as on a rig. The journal: one real failure line,
then 100,000 real harmless lines (the corpus of tests/unit/test_known_failures_corpus.py, under a
``short-iso`` journal prefix).
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from rigforge.checks.known_failures import find_known_failures
from rigforge.doctor import render_table
from rigforge.facts.logs import HEAD_LINES, NEEDLE_HEAD, TAIL_LINES, KnownFailureLogs
from rigforge.known_failures.match import main as wait_main
from roles.doctor import hit_record
from tests.unit.test_known_failures_corpus import corpus

HARMLESS = 100_000
PREFIX = "2026-11-26T14:00:{second:02d}+0000 rig2x-a {program}: "
XID_79 = "NVRM: Xid (PCI:0000:41:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
MISSING = ("0.00.005.102 E gguf_init_from_file: failed to open GGUF file '/srv/models/nope/missing.gguf' "
           "(No such file or directory)")
#: Real error lines no signature knows (held-out misses: https://github.com/pytorch/ao/issues/3788,
#: https://github.com/NVIDIA/open-gpu-kernel-modules/issues/943).
UNKNOWN = ("RuntimeError: CUDA error: CUBLAS_STATUS_INVALID_VALUE when calling ::cublasLtMatmulDescSetAttribute("
           "descriptor(), attr, &value, sizeof(value))")
UNKNOWN_KERNEL = ("[   10.842114] NVRM: s_prepareForFwsec_TU102: failed to prepare interface data for FWSEC cmd "
                  "0x15: 0x25")


def journal(path: Path, first: str, program: str) -> Path:
    """``first``, then HARMLESS harmless lines, each under a journal prefix."""
    base = corpus()
    lines = [first] + [base[index % len(base)] for index in range(HARMLESS)]
    path.write_text("".join(PREFIX.format(second=index % 60, program=program) + line + "\n"
                            for index, line in enumerate(lines)))
    return path


@pytest.fixture()
def rig_bin(tmp_path: Path) -> Path:
    """journalctl and systemctl that print the test's journals (the kernel's, the engine invocation's)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    scripts = {
        "journalctl": f"""#!/bin/sh
case "$*" in
  *SYSLOG_IDENTIFIER=kernel*) cat {tmp_path}/kernel.log ;;
  *_SYSTEMD_INVOCATION_ID=*) cat {tmp_path}/engine.log ;;
esac
""",
        "systemctl": "#!/bin/sh\necho 0f3c\n",
    }
    for name, text in scripts.items():
        (folder / name).write_text(text)
        (folder / name).chmod(stat.S_IRWXU)
    return folder


def read_rig(rig_bin: Path) -> tuple[list[str], KnownFailureLogs]:
    fact = KnownFailureLogs()
    run = subprocess.run(["/bin/sh", "-c", fact.command()], capture_output=True, text=True, check=True,
                         env={**os.environ, "PATH": f"{rig_bin}:/usr/bin:/bin"})
    output = run.stdout.splitlines()
    return output, fact.process(output)


def test_a_failure_before_100000_harmless_lines_is_named(tmp_path: Path, rig_bin: Path) -> None:
    journal(tmp_path / "kernel.log", XID_79, "kernel")
    journal(tmp_path / "engine.log", MISSING, "python[2304]")
    output, logs = read_rig(rig_bin)
    assert len(output) <= 3 + 2 * (HEAD_LINES + TAIL_LINES) + 2  # candidates only, bounded
    hits = find_known_failures(logs)
    assert [(hit.id, hit.where) for hit in hits] == [("xid-79-fallen-off-bus", "kernel"),
                                                     ("llama-model-file-missing", "startup")]
    table = render_table(["rig2x-a"], {"rig2x-a": {"host": "rig2x-a", "hits": [hit_record(hit) for hit in hits]}})
    assert "| rig2x-a | kernel | xid-79-fallen-off-bus | blocking | 1 |" in table
    assert "| rig2x-a | engine | llama-model-file-missing | fail | 1 |" in table


def test_a_failure_amid_100000_error_word_lines_is_named(tmp_path: Path, rig_bin: Path) -> None:
    """Harmless lines that hold an error word (the driver's own NVRM: load lines) are bounded on their own: they
    do not crowd out a signature's line in the middle of them."""
    loading = next(line for line in corpus() if "NVRM: loading NVIDIA" in line)
    lines = [loading] * (HARMLESS // 2) + [XID_79] + [loading] * (HARMLESS // 2)
    (tmp_path / "kernel.log").write_text("".join(PREFIX.format(second=0, program="kernel") + line + "\n"
                                                 for line in lines))
    (tmp_path / "engine.log").write_text("")
    output, logs = read_rig(rig_bin)
    assert len(output) <= 3 + HEAD_LINES + TAIL_LINES + 1
    assert [hit.id for hit in find_known_failures(logs)] == ["xid-79-fallen-off-bus"]


def test_a_harmless_line_of_a_needle_repeated_crowds_out_no_failure(tmp_path: Path, rig_bin: Path) -> None:
    """A harmless line that holds a needle (NCCL's teardown WARN), 200,000 times: a failure of the same needle
    (NCCL's out-of-memory WARN, nccl-warning's example) and one of another needle, both in the middle, come back;
    the repeated line itself comes back NEEDLE_HEAD times and once more as a message, no more."""
    teardown = next(line for line in corpus() if "driver shutting down" in line)
    oom = "ng30903:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'"
    lines = [teardown] * HARMLESS + [oom, MISSING] + [teardown] * HARMLESS
    (tmp_path / "engine.log").write_text("".join(PREFIX.format(second=index % 60, program="python[2304]") + line
                                                 + "\n" for index, line in enumerate(lines)))
    (tmp_path / "kernel.log").write_text("")
    output, logs = read_rig(rig_bin)
    assert len(output) <= 3 + NEEDLE_HEAD + 3
    assert [hit.id for hit in find_known_failures(logs)] == ["nccl-warning", "llama-model-file-missing"]


def test_an_unknown_error_before_100000_harmless_lines_is_shown_unrecognised(tmp_path: Path, rig_bin: Path) -> None:
    journal(tmp_path / "kernel.log", UNKNOWN_KERNEL, "kernel")
    journal(tmp_path / "engine.log", UNKNOWN, "python[2304]")
    _, logs = read_rig(rig_bin)
    hits = find_known_failures(logs)
    assert [(hit.id, hit.severity, hit.count) for hit in hits] == [
        ("unrecognised-error-lines", "unrecognised", 1), ("unrecognised-error-lines", "unrecognised", 1)]
    table = render_table(["rig2x-a"], {"rig2x-a": {"host": "rig2x-a", "hits": [hit_record(hit) for hit in hits]}})
    assert "| rig2x-a | engine | unrecognised-error-lines | unrecognised | 1 |" in table and UNKNOWN in table
    assert "none" not in table


def test_the_health_wait_reads_its_whole_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The wait script's matcher on the engine's whole output since the wait began (no tail)."""
    from rigforge.known_failures import signature_data

    path = journal(tmp_path / "engine.log", MISSING, "python[2304]")
    assert wait_main(signature_data("startup"), [str(path)]) == 0
    assert capsys.readouterr().out.startswith("known failure llama-model-file-missing (fail)")
    journal(path, UNKNOWN, "python[2304]")
    wait_main(signature_data("startup"), [str(path)])
    assert capsys.readouterr().out.startswith(f"1 unrecognised error line(s) (unrecognised), first: {PREFIX[:10]}")
