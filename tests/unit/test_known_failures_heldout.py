"""The signatures recognise failure classes, not copied lines: measured on real lines they were not written from.

tests/fixtures/known-failures/heldout/lines.txt and format-strings.txt (the classes whose signatures were written from
their programs' format strings) hold real failure lines quoted in public threads, each block under the signature its
class must give and the page it is quoted from; no page there is cited in inventory/known-failures.yaml, so no
signature was written from them. The rates measured here are the ones docs/troubleshooting.md states (the second set
by class too); a held-out line no signature recognises is still reported, as an unrecognised error line: none reads
as clean.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rigforge.known_failures import known_signatures, match_lines, signature_data
from rigforge.known_failures.match import unrecognised_hit

ROOT = Path(__file__).resolve().parents[2]
HELDOUT = ROOT / "tests" / "fixtures" / "known-failures" / "heldout" / "lines.txt"
FORMAT_SPLIT = HELDOUT.with_name("format-strings.txt")
ALL = signature_data()
PLACES = ("kernel", "engine", "startup", "bench")
#: The floor the acceptance sets for lines no signature was written from.
FLOOR = 0.8


def heldout_lines(path: Path = HELDOUT) -> list[tuple[str, str, str]]:
    """(expected signature, source URL, line) of every held-out line of a set."""
    expected = source = ""
    found = []
    for line in path.read_text().splitlines():
        if line.startswith("# expect: "):
            expected = line.removeprefix("# expect: ")
        elif line.startswith("# source: "):
            source = line.removeprefix("# source: ")
        elif line.strip() and not line.startswith("# "):
            found.append((expected, source, line))
    return found


def matched_ids(line: str) -> set[str]:
    return {hit.id for where in PLACES for hit in match_lines(ALL, [line], where)}


def recognised(path: Path = HELDOUT) -> list[tuple[str, str, str]]:
    return [row for row in heldout_lines(path) if row[0] in matched_ids(row[2])]


@pytest.mark.parametrize("path", [HELDOUT, FORMAT_SPLIT], ids=lambda path: path.name)
def test_the_heldout_set_is_real_and_apart(path: Path) -> None:
    rows = heldout_lines(path)
    ids = {signature.id for signature in known_signatures()}
    assert len(rows) >= 60 and len({source for _, source, _ in rows}) >= 50
    assert {expected for expected, _, _ in rows} <= ids
    cited = {url.rstrip(".") for signature in known_signatures()
             for url in re.findall(r"https?://[^\s,;()']+", signature.source)}
    assert [source for _, source, _ in rows if source in cited] == []


def test_the_heldout_rate_is_the_documented_one_and_above_the_floor() -> None:
    """Also on the lines no example repeats word for word (another page may quote the very same message)."""
    rows, hits = heldout_lines(), recognised()
    examples = {line for signature in known_signatures() for line in signature.examples}
    new_rows = [row for row in rows if row[2] not in examples]
    new_hits = [row for row in hits if row[2] not in examples]
    assert len(hits) / len(rows) >= FLOOR and len(new_hits) / len(new_rows) >= FLOOR
    docs = (ROOT / "docs" / "troubleshooting.md").read_text()
    assert f"{len(hits)} of {len(rows)} held-out lines" in docs
    assert f"{len(new_hits)} of the {len(new_rows)} that repeat no example" in docs


@pytest.mark.parametrize("path", [HELDOUT, FORMAT_SPLIT], ids=lambda path: path.name)
def test_no_heldout_line_gives_another_class(path: Path) -> None:
    wrong = {line: sorted(matched_ids(line) - {expected}) for expected, _, line in heldout_lines(path)
             if matched_ids(line) - {expected}}
    assert wrong == {}


@pytest.mark.parametrize("path", [HELDOUT, FORMAT_SPLIT], ids=lambda path: path.name)
def test_a_heldout_line_no_signature_knows_is_an_unrecognised_error_line(path: Path) -> None:
    missed = [line for expected, _, line in heldout_lines(path) if expected not in matched_ids(line)]
    assert missed, "every held-out line is recognised: the documented misses are gone, update the docs"
    for line in missed:
        assert any(unrecognised_hit(ALL, [line], where) for where in ("kernel", "engine")), line


def test_every_class_the_issue_names_has_a_signature() -> None:
    """The classes an owner meets first (docs/troubleshooting.md's table), each a signature of its own."""
    classes = {"nvidia-driver-not-loaded", "driver-library-version-mismatch", "nvml-unknown-error",
               "docker-gpus-without-nvidia-runtime", "gsp-boot-or-rpc-failed", "cuda-oom-at-start",
               "triton-shared-memory-exceeded", "cute-dsl-arch-refused", "cublaslt-fp8-gemm-refused",
               "engine-rpc-timeout", "nvml-p2p-query-refused", "hf-repo-or-file-not-found", "hf-download-low-disk"}
    assert classes <= {signature.id for signature in known_signatures()}


def test_sources_are_urls() -> None:
    assert all(re.match(r"https://\S+$", source) for _, source, _ in heldout_lines())


def format_split_by_class() -> dict[str, tuple[int, int, int]]:
    """Per class of the format-string split: (lines it was written from, held-out lines, held-out lines recognised)."""
    rows, hits = heldout_lines(FORMAT_SPLIT), recognised(FORMAT_SPLIT)
    written = {signature.id: len(signature.examples) for signature in known_signatures()}
    return {expected: (written[expected], sum(row[0] == expected for row in rows),
                       sum(row[0] == expected for row in hits)) for expected in dict.fromkeys(e for e, _, _ in rows)}


def test_the_format_string_split_rate_is_the_documented_one_by_class_and_above_the_floor() -> None:
    """docs/troubleshooting.md's coverage table: each class's row states its split and its rate on the unseen part."""
    rows, hits = heldout_lines(FORMAT_SPLIT), recognised(FORMAT_SPLIT)
    assert len(hits) / len(rows) >= FLOOR
    docs = (ROOT / "docs" / "troubleshooting.md").read_text()
    assert f"{len(hits)} of {len(rows)} lines of the format-string split" in docs
    for signature_id, (written, held, recognised_lines) in format_split_by_class().items():
        assert f"| `{signature_id}` | {written} | {held} | {recognised_lines} of {held} |" in docs, signature_id
