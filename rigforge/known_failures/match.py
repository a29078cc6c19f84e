"""Match log lines against known-failure signatures: standard library only, so it runs on the rig too.

The signatures arrive as plain mappings (``Signature.as_data()`` on the controller, a JSON literal inside
the health-wait script on the rig), so this module needs neither pydantic nor the YAML file. The health
wait runs it on the rig as ``python3 - JOURNAL_FILE [--hung]`` with ``main`` fed its signatures.

    hits = match_lines(signatures, lines, where="startup")
    for hit in hits:
        print(hit_line(hit))    # known failure llama-port-in-use: another process ...; fix: ...
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

#: Longest line kept in a report: a kernel or engine line can be kilobytes (a tensor dump).
MAX_LINE = 240


@dataclass(frozen=True)
class Hit:
    """One signature found in a log: its first matching line and how many lines matched.

    + signature: the signature's fields (id, severity, cause, fix, profile_fields, source...)
    + where: the log it was found in (kernel, engine, startup, bench)
    + line: the first matching line, cut at MAX_LINE characters
    + count: matching lines in that log
    """

    signature: Mapping[str, Any]
    where: str
    line: str
    count: int

    @property
    def id(self) -> str:
        """The signature's id."""
        return str(self.signature["id"])

    @property
    def severity(self) -> str:
        """blocking, fail or warn."""
        return str(self.signature["severity"])


def needles_of(signature: Mapping[str, Any]) -> tuple[str, ...]:
    """A signature's needles: one fixed string, or a list of them (a line holding any one is a candidate).

    >>> needles_of({"needle": "NVRM: Xid"}), needles_of({"needle": ["a", "b"]})
    (('NVRM: Xid',), ('a', 'b'))
    """
    needle = signature["needle"]
    return (needle,) if isinstance(needle, str) else tuple(needle)


def held_lines(lines: Sequence[str], words: Iterable[str]) -> list[str]:
    """The lines holding one of ``words``, in log order: a line holding none can match no signature.

    + lines: the log's lines
    + words: every needle of the signatures tried

    Each needle is looked for with ``str.find`` in the log joined once, and its finds mapped back to lines:
    a journal's lines mostly hold no needle, so this costs a few scans at C speed instead of one test per
    signature (or one regular-expression search) per line (measurements/known_failures_speed.py).

    >>> held_lines(["ok", "NVRM: Xid 79", "fine", "Xid again NVRM: Xid"], ["NVRM: Xid"])
    ['NVRM: Xid 79', 'Xid again NVRM: Xid']
    """
    text = "\n".join(lines)
    starts: list[int] = []
    found: set[int] = set()
    for word in set(words):
        at = text.find(word)
        while at != -1:
            if not starts:
                starts = list(accumulate((len(line) + 1 for line in lines), initial=0))
            index = bisect_right(starts, at) - 1
            found.add(index)
            at = text.find(word, starts[index + 1])  # the next line: one find per line is enough
    return [lines[index] for index in sorted(found)]


def match_lines(signatures: Iterable[Mapping[str, Any]], lines: Sequence[str], where: str,
                hung: bool = False) -> list[Hit]:
    """Every signature shown in ``where`` whose pattern one of ``lines`` holds, in signature order.

    + signatures: mappings with id, where, needle (a string or a list), pattern, severity, hang_only...
    + lines: the log's lines, oldest first
    + where: which log these are (``kernel``, ``engine`` or ``startup``)
    + hung: the engine never answered and never exited (health wait timed out): ``hang_only``
      signatures are tried on the last line, the one it stopped at

    Example: ``match_lines(sigs, ["... couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080"], "startup")``
    """
    shown = [signature for signature in signatures if where in signature["where"]]
    held = held_lines(lines, [word for signature in shown if not signature.get("hang_only")
                              for word in needles_of(signature)])
    hits = []
    for signature in shown:
        if signature.get("hang_only"):
            candidates = list(lines[-1:]) if hung else []
        else:
            words = needles_of(signature)
            candidates = [line for line in held if any(word in line for word in words)]
        pattern = re.compile(signature["pattern"])  # re caches compiled patterns
        matching = [line for line in candidates if pattern.search(line)]
        if matching:
            hits.append(Hit(signature, where, matching[0].strip()[:MAX_LINE], len(matching)))
    return hits


def hit_line(hit: Hit) -> str:
    """The one line that names a hit: id, severity, cause and fix.

    >>> hit_line(Hit({"id": "x", "severity": "fail", "cause": "c", "fix": "f"}, "startup", "l", 1))
    'known failure x (fail): c; fix: f'
    """
    signature = hit.signature
    return f"known failure {hit.id} ({hit.severity}): {signature['cause']}; fix: {signature['fix']}"


def main(signatures: Sequence[Mapping[str, Any]], argv: Sequence[str]) -> int:
    """On the rig: print one line per known failure in a journal file; exit 0 whatever it finds.

    + signatures: the signatures as mappings (the health-wait script embeds them as JSON)
    + argv: ``JOURNAL_FILE [--hung]``
    """
    path, hung = argv[0], "--hung" in argv[1:]
    with open(path, encoding="utf-8", errors="replace") as journal:
        lines = journal.read().splitlines()
    for hit in match_lines(signatures, lines, "startup", hung=hung):
        print(hit_line(hit))
    return 0

