"""Load the wire captures in ``captures/`` as the benchmark's RawStream, with chosen arrival times."""

from __future__ import annotations

from pathlib import Path

from rigforge.bench.transport import RawStream

CAPTURES = Path(__file__).resolve().parent / "captures"
SENT_AT = 100.0  # an arbitrary perf_counter origin; only differences matter


def capture_text(name: str) -> str:
    """The raw text of one capture file."""
    return (CAPTURES / name).read_text()


def capture_lines(name: str) -> list[str]:
    """The non-empty lines of an SSE capture, as the transport stores them."""
    return [line.strip() for line in capture_text(name).splitlines() if line.strip()]


def raw_stream(name: str, first_after_s: float = 0.05, gap_s: float = 0.01, status: int = 200) -> RawStream:
    """A RawStream whose first line arrives ``first_after_s`` after sending and the rest ``gap_s`` apart."""
    lines = capture_lines(name)
    times = [SENT_AT + first_after_s + index * gap_s for index in range(len(lines))]
    return RawStream(sent_at=SENT_AT, status=status, lines=list(zip(times, lines, strict=True)), ended_at=times[-1])
