"""Small text helpers shared by the fact parsers (pure functions, no pyinfra)."""

from __future__ import annotations

import re

_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences (nvidia-smi underlines table headers even into a pipe)."""
    return _ANSI_ESCAPE.sub("", text)


def split_sections(text: str, first: str = "") -> dict[str, str]:
    """Split a composite command's output at its `## name` marker lines.

    Text before the first marker is filed under `first`. Fact commands that run more than one
    tool print such markers between the tools so one round trip serves one fact.

    >>> split_sections("a\\n## b\\nc")
    {'': 'a', 'b': 'c'}
    """
    sections: dict[str, list[str]] = {first: []}
    current = first
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
        else:
            sections[current].append(line)
    return {name: "\n".join(lines) for name, lines in sections.items()}


def parse_grep_h(text: str) -> dict[str, str]:
    """Parse `grep -H '' FILE...` output (`path:value` lines) into {path: value}.

    Sysfs paths hold no ':' of their own, so the first ':' separates path from value.
    Lines without a ':' (shell noise) are skipped.
    """
    values: dict[str, str] = {}
    for line in text.splitlines():
        path, sep, value = line.partition(":")
        if sep:
            values[path] = value
    return values


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """Expand a kernel CPU list such as `0-63,128-191` into sorted CPU numbers.

    Anything that is not a list of numbers and ranges (`N/A`, empty) gives an empty tuple.

    >>> parse_cpu_list("0-2,8")
    (0, 1, 2, 8)
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        start, dash, end = part.partition("-")
        if not start.isdigit() or (dash and not end.isdigit()):
            return ()
        cpus.update(range(int(start), int(end if dash else start) + 1))
    return tuple(sorted(cpus))


def first_number(text: str | None) -> float | None:
    """The leading number of a value such as `97887 MiB`, `600.00 W` or `16x`; None for `N/A`."""
    if text is None:
        return None
    match = re.match(r"\s*(-?\d+(?:\.\d+)?)", text)
    return float(match.group(1)) if match else None
