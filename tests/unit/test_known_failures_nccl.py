"""The NCCL graph's two failures, recognised on real captures (tests/fixtures/nccl/: one-rank NCCL all-reduce
runs on the lent H100, NCCL 2.28.9), and nothing recognised in the runs that worked or in lines that look alike.

Each capture is a whole run's output, stdout and stderr together, as the engine's journal holds it: with
NCCL_DEBUG=INFO (NCCL's own WARN line) and without it (only the exception's `Last error:` line).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rigforge.known_failures import hit_line, match_lines, signature_data

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"
ALL = signature_data()
MISSING, MALFORMED, NO_FILE = "nccl-graph-device-missing", "nccl-graph-xml-malformed", "nccl-graph-file-missing"

#: Capture -> what NCCL did with it (the manifest's exit status says the same: 0 ran, 1 failed).
OUTCOMES = {
    "a-no-graph.log": None,
    "b-graph-8x-env.log": MISSING,
    "b-graph-8x-env-no-debug.log": MISSING,
    "b-graph-8x-conf-file.log": MISSING,
    "b-graph-8x-etc-nccl-conf.log": MISSING,
    "c-graph-truncated.log": MALFORMED,
    "c-graph-unclosed-tag.log": MALFORMED,
    "c-graph-unclosed-tag-no-debug.log": MALFORMED,
    "d-graph-1gpu.log": None,
    "e-graph-empty.log": NO_FILE,
    "e-graph-empty-no-debug.log": NO_FILE,
    "b-graph-8x-env-subsys-env.log": MISSING,
}

#: Real lines of the captures that resemble a signature's and must match none.
NEAR_MISSES = [
    "vm:753:753 [0] NCCL INFO Search 0 : 2 channels loaded from XML graph",  # d-graph-1gpu: a graph that fits
    "vm:542:542 [0] NCCL INFO Loading graphs",
    "vm:542:542 [0] NCCL INFO graph/search.cc:883 -> 2",
    "vm:665:665 [0] NCCL INFO graph/xml.cc:81 -> 3",
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
    "ncclInternalError: Internal check failed.",
    "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, "
    "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.28.9",
    "vm:549:549 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to /etc/nccl_graph_opt.xml",
    "vm:488:488 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to ",
    # NCCL's own INFO line for a file it still reads (src/graph/xml.cc), and a device that was found.
    "NCCL INFO XML Parse : Ignoring extra attributes (max 16)",
    "NCCL INFO XML Import Channel : dev 1 found",
    "NCCL INFO Could not open XML topology file /etc/topo.xml : No such file or directory",
]


def _ids(lines: list[str]) -> list[str]:
    return [hit.id for where in ("engine", "startup") for hit in match_lines(ALL, lines, where)]


def _lines(name: str) -> list[str]:
    return (CAPTURES / name).read_text().splitlines()


@pytest.mark.parametrize(("capture", "expected"), sorted(OUTCOMES.items()))
def test_each_capture_gives_exactly_its_failure(capture: str, expected: str | None) -> None:
    found = set(_ids(_lines(capture)))
    assert found == ({expected} if expected else set()), capture


def test_the_captures_are_what_the_manifests_say() -> None:
    rows = [line.split("\t") for name in ("manifest.tsv", "manifest-2.tsv") for line in _lines(name)[1:]]
    status = {f"{row[0]}.log": row[1] for row in rows}
    assert status == {name: "0" if outcome is None else "1" for name, outcome in OUTCOMES.items()}
    assert all("all_reduce ok 1.0" in _lines(name) for name, outcome in OUTCOMES.items() if outcome is None)


@pytest.mark.parametrize("line", NEAR_MISSES)
def test_a_line_that_merely_resembles_one_matches_nothing(line: str) -> None:
    assert _ids([line]) == []


def test_the_report_line_says_the_fix() -> None:
    hits = match_lines(ALL, _lines("b-graph-8x-env-no-debug.log"), "startup")
    assert [hit.line for hit in hits] == ["XML Import Channel : dev 1 not found."]
    assert hit_line(hits[0]).endswith("fix: the graph names devices this communicator lacks: drop NCCL_GRAPH_FILE "
                                      "for that engine or layout (nccl.graph_xml: false), or make every group span "
                                      "all the graph's GPUs")
    malformed = match_lines(ALL, _lines("c-graph-truncated.log"), "startup")[0]
    # NCCL's WARN line, then the same text after the exception's `Last error:`.
    assert malformed.line.endswith("NCCL WARN XML Parse : Unexpected EOF") and malformed.count == 2
    assert "fix: the file is malformed: re-run the host layer" in hit_line(malformed)
