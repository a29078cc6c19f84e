"""The known-failure matcher on a 1,000,000-line engine journal: lines per second, side by side (no asserting).

The journal is built from real harmless lines (tests/fixtures/known-failures/harmless/public-lines.txt, the NCCL
runs that worked in tests/fixtures/nccl/, the sandbox engine's healthy start), each under a journal prefix
(``short-iso``, as the fact reads it), with every signature's first example line planted at spread positions.
Measured, each ``--repeats`` times (median, and the spread of the repeats as the A/A check):

- ``per-signature``: the matcher before the prefilter (each signature scans every line for its needles);
- ``prefilter``: ``rigforge.known_failures.match_lines`` (every needle found with ``str.find`` in the joined
  log, then the signatures on the lines that hold one);
- ``grep -F | head+tail``: the doctor's path on the rig (the fact's own filter, ``rigforge.facts.logs.grep_needles``,
  on the needles and the error words, the whole window, the first and last candidate lines) with the matcher on
  the lines it sends;
- ``health wait``: the wait script's matcher (``rigforge.known_failures.match.main``: the signatures and the
  unrecognised error lines) reading the whole file.

Every path must report the same signatures (the health wait, as a report, leaves out those that say only that
something failed when another explains the journal: compared without them); the script says so.

    .venv/bin/python measurements/known_failures_speed.py [--lines 1000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rigforge.facts.logs import grep_needles  # noqa: E402
from rigforge.known_failures import known_signatures, match_lines, needles, signature_data  # noqa: E402
from rigforge.known_failures.match import ERROR_WORDS, needles_of  # noqa: E402
from rigforge.known_failures.match import main as wait_main  # noqa: E402

FIXTURES = REPO_ROOT / "tests" / "fixtures"
PREFIX = "2026-11-26T14:{minute:02d}:{second:02d}+0000 rig2x-a docker[4121]: "


def harmless_lines() -> list[str]:
    """Real harmless engine-side lines (the corpus of tests/unit/test_known_failures_corpus.py, less the logs of
    other programs)."""
    public = [line for line in (FIXTURES / "known-failures" / "harmless" / "public-lines.txt").read_text().splitlines()
              if line.strip() and not line.startswith("# ")]
    files = [FIXTURES / "nccl" / "a-no-graph.log", FIXTURES / "nccl" / "d-graph-1gpu.log",
             FIXTURES / "known-failures" / "llama-healthy-start.txt"]
    return public + [line for path in files for line in path.read_text().splitlines() if line.strip()]


def build_journal(total: int) -> tuple[list[str], list[str]]:
    """(the journal's lines, the failure lines planted in it)."""
    base = harmless_lines()
    planted = [signature.examples[0] for signature in known_signatures()
               if ("engine" in signature.where or "startup" in signature.where) and not signature.hang_only]
    step = total // (len(planted) + 1)
    lines = []
    for index in range(total):
        line = planted[index // step - 1] if index % step == 0 and 0 < index // step <= len(planted) else \
            base[index % len(base)]
        lines.append(PREFIX.format(minute=(index // 60) % 60, second=index % 60) + line)
    return lines, planted


def per_signature(signatures: Iterable[Mapping[str, Any]], lines: Sequence[str], where: str) -> list[tuple[str, int]]:
    """The matcher as it was before the prefilter: each signature scans every line for its needles."""
    hits = []
    for signature in signatures:
        if where not in signature["where"] or signature.get("hang_only"):
            continue
        words = needles_of(signature)
        candidates = [line for line in lines if any(word in line for word in words)]
        pattern = re.compile(signature["pattern"])
        matching = [line for line in candidates if pattern.search(line)]
        if matching:
            hits.append((str(signature["id"]), len(matching)))
    return hits


def prefiltered(signatures: list[dict[str, Any]], lines: Sequence[str], where: str) -> list[tuple[str, int]]:
    return [(hit.id, hit.count) for hit in match_lines(signatures, lines, where)]


def through_grep(signatures: list[dict[str, Any]], path: Path) -> list[tuple[str, int]]:
    """The doctor's path: the rig's grep -F on the engine needles and error words, head and tail, then the matcher."""
    engine = list(dict.fromkeys(needles("engine") + needles("startup")))
    sent = subprocess.run(["sh", "-c", f"< {path} {grep_needles(engine, ERROR_WORDS['engine'])}"], capture_output=True,
                          text=True,
                          check=True).stdout.splitlines()
    found: dict[str, int] = {}
    for where in ("engine", "startup"):
        for hit in match_lines(signatures, sent, where):
            found.setdefault(hit.id, hit.count)
    return sorted(found.items())


def health_wait(signatures: list[dict[str, Any]], path: Path) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        wait_main(signatures, [str(path)])
    return [line.split()[2] for line in out.getvalue().splitlines()]


def timed(repeats: int, run: Callable[[], object]) -> tuple[list[float], object]:
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
    return times, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    lines, planted = build_journal(args.lines)
    signatures = signature_data()
    startup = [s for s in signatures if "startup" in s["where"]]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "journal.txt"
        path.write_text("\n".join(lines) + "\n")
        size = path.stat().st_size
        runs = {
            "per-signature": timed(args.repeats, lambda: per_signature(signatures, lines, "startup")),
            "prefilter": timed(args.repeats, lambda: prefiltered(signatures, lines, "startup")),
            "grep -F | head+tail + matcher": timed(args.repeats, lambda: through_grep(signatures, path)),
            "health wait (reads the file)": timed(args.repeats, lambda: health_wait(startup, path)),
        }
    print(f"journal: {len(lines):,} lines, {size / 1e6:.0f} MB, {len(planted)} failure lines planted; "
          f"{len(signatures)} signatures; {args.repeats} repeats each")
    baseline = statistics.median(runs["per-signature"][0])
    print(f"{'path':<30} {'median s':>9} {'spread':>8} {'lines/s':>12} {'vs per-signature':>17}  signatures found")
    for name, (times, result) in runs.items():
        median = statistics.median(times)
        spread = (max(times) - min(times)) / median if median else 0.0
        found = len(result) if isinstance(result, list) else "?"
        print(f"{name:<30} {median:>9.2f} {spread:>7.0%} {len(lines) / median:>12,.0f} "
              f"{baseline / median:>16.1f}x  {found}")
    # The health wait prints what a report shows: a signature that says only that something failed (explains: false)
    # is left out of a journal another known failure explains, as the planted journal is; compared without them.
    quiet = {str(s["id"]) for s in signatures if not s.get("explains", True)}
    same = {name: sorted(ident for item in result  # type: ignore[union-attr]
                         if (ident := item if isinstance(item, str) else item[0]) not in quiet)
            for name, (_, result) in runs.items()}
    agree = len({tuple(ids) for ids in same.values()}) == 1
    print(f"same signatures on every path: {'yes' if agree else 'NO: ' + repr(same)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
