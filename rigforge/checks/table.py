"""Render checks as a plain-text table: check | expected | found | verdict | fix (and rigforge/checks/takeover.py's).

Long cells wrap inside their column so the table stays readable in a terminal and in a log file.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from rigforge.checks.model import Check

HEADERS = ("check", "expected", "found", "verdict", "fix")
#: Widest a column may get before its cells wrap (the fix column is last and wraps at this width too).
MAX_WIDTHS = (20, 34, 40, 15, 70)


def verdict_text(check: Check) -> str:
    """`ok`, `warn`, `fail`, or `fail (blocking)` when the deploy cannot fix it."""
    return f"{check.verdict} (blocking)" if check.blocking and check.verdict == "fail" else check.verdict


def _cells(check: Check) -> tuple[str, ...]:
    return (check.name, check.expected, check.found, verdict_text(check), check.fix or "-")


def table_lines(checks: Sequence[Check]) -> list[str]:
    """The table as lines (no trailing spaces), header and rule first."""
    return render_table(HEADERS, [_cells(check) for check in checks], MAX_WIDTHS)


def render_table(headers: Sequence[str], cells: Sequence[Sequence[str]], max_widths: Sequence[int]) -> list[str]:
    """Any table as lines: a header, a rule, then each row with long cells wrapped to ``max_widths``."""
    rows = [tuple(headers), *(tuple(row) for row in cells)]
    widths = [min(max(len(row[column]) for row in rows), max_widths[column]) for column in range(len(headers))]
    lines = [_line(rows[0], widths), "-+-".join("-" * width for width in widths)]
    for row in rows[1:]:
        wrapped = [textwrap.wrap(cell, width) or [""] for cell, width in zip(row, widths, strict=True)]
        for index in range(max(len(cell) for cell in wrapped)):
            lines.append(_line([cell[index] if index < len(cell) else "" for cell in wrapped], widths))
    return lines


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    return " | ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()
