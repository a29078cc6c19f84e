"""Match log lines against known-failure signatures: standard library only, so it runs on the rig too.

The signatures arrive as plain mappings (``Signature.as_data()`` on the controller, a JSON literal inside
the health-wait script on the rig), so this module needs neither pydantic nor the YAML file. The health
wait runs it on the rig as ``python3 - JOURNAL_FILE [--hung]`` with ``main`` fed its signatures.

A line at error level that no signature recognises (a traceback's last line, ``ERROR``, ``Error response from
daemon``, a ``CUDA error``, an ``NVRM:`` failure, a process that exited non-zero) is not dropped: the log's
unrecognised error lines come back as one hit of their own (``unrecognised_hit``), so a log with an error in it
never reads as clean.

    hits = match_lines(signatures, lines, where="startup")
    for hit in hits:
        print(hit_line(hit))    # known failure llama-port-in-use: another process ...; fix: ...
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

#: Longest line kept in a report: a kernel or engine line can be kilobytes (a tensor dump).
MAX_LINE = 240
#: The severity of error lines no signature recognises.
UNRECOGNISED = "unrecognised"
#: Fixed text every line at error level holds, by log (the rig's grep sends these lines beside the needles').
ERROR_WORDS = {
    "kernel": ("NVRM", "Uncorrect", "device recovery failed", "can't recover", "DPC: ", "AMD-Vi: Event logged",
               "IO_PAGE_FAULT", "DMAR: ", "Lockdown: ", "is rejected", "BUG: ", "Oops", "general protection fault",
               "Kernel panic", "blocked for more than", "Killed process", "Hardware Error", "I/O error",
               "EXT4-fs error", "nvidia-modeset: ERROR", "fallen off the bus"),
    "engine": ("Error", "ERROR", "error", "Exception", "NVRM:", " E ", "[E", "exited, code=",
               "Failed with result", "CRITICAL", "FATAL", "fatal", "Failed to start", "Dependency failed",
               "repeated too quickly", "could not insert", "Lockdown"),
}
#: A line at error level, by log: the words of the format strings the programs print at error level (the kernel's
#: pci_err/dev_err/pr_err lines, journald priority err and above; an engine's ERROR and CRITICAL), since the lines the
#: rig sends carry no priority. Kernel: the NVIDIA driver's failures (``NVRM:``, ``NVRM`` in older drivers) and every
#: Xid; the AER driver's uncorrectable errors and failed recoveries, DPC containment, IOMMU faults (AMD-Vi, DMAR), a
#: module refused by lockdown, the kernel's own BUG/Oops/panic/hung task, the OOM killer, machine checks, I/O errors.
#: Engine: a traceback's last line (``RuntimeError: ...``, ``torch.OutOfMemoryError: ...``), a logger's ERROR,
#: CRITICAL or FATAL level (vLLM, SGLang, Python's logging, glog's ``E1206``, llama.cpp's `` E ``), Docker's refusal,
#: a CUDA error, an NVRM failure, a compiler's ``error   :``/``fatal   :``, DKMS's ``Error!``, modprobe's refusal, a
#: unit that failed to start, a process that exited non-zero or was killed by a signal systemd does not count as a
#: clean stop (HUP, INT, PIPE, TERM: a restart is not an error). NCCL's WARN lines are warnings: nccl-warning knows
#: the ones that matter.
ERROR_LINES = {
    "kernel": r"NVRM:? (?:Xid |.*(?:\b[Ff]ailed\b|\b[Ee]rror\b|[Tt]imed? ?out|Assertion|mismatch|[Cc]annot |"
              r"unexpected|No firmware))|\bAER: (?:.*Uncorrect|device recovery failed|can't recover)|"
              r"PCIe Bus Error: severity=Uncorrect|\bDPC: (?:containment event|.* detected)|AMD-Vi: Event logged|"
              r"(?:^|\] )IO_PAGE_FAULT|DMAR: (?:DRHD: handling fault|\[DMA )|Lockdown: .* is restricted|"
              r"Loading of .*module.* is rejected|\bBUG: |\bOops\b|general protection fault|Kernel panic|"
              r"blocked for more than \d+ seconds|(?:Out of memory|Memory cgroup out of memory): Killed process|"
              r"\[Hardware Error\]|\bI/O error\b|EXT4-fs error|nvidia-modeset: ERROR|has fallen off the bus",
    "engine": r"(?:^|[\s\]:|>(])(?:[a-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception)(?:: |:?$)|"
              r"\bERROR\b|\bCRITICAL\b|\bFATAL\b|Error response from daemon|CUDA error\b|\bNVRM: .*(?:failed|[Ee]rror)|"
              r"(?:^|[\s\]]|: )\[?E\d{4} \d|^(?:.*: )?\d+\.\d{2}\.\d{3}\.\d{3} E |"
              r"(?:Main|Control) process exited, code=(?:exited, status=[1-9]|killed, "
              r"status=(?!(?:1|2|13|15)/)|dumped)|"
              r"Failed with result '|(?:^|systemd\[\d+\]: |\[FAILED\] )Failed to start |Dependency failed for |"
              r"Start request repeated too quickly|could not insert |Lockdown: .* is restricted|"
              r"(?:^|\s)(?:fatal |initialization )?error: |\b(?:error|fatal)\s+: |\bError! ",
}
#: How a place's lines are read for error level (startup lines are the engine's).
ERROR_PLACE = {"kernel": "kernel", "engine": "engine", "startup": "engine"}
#: The cause and fix an unrecognised-lines hit carries.
UNRECOGNISED_SIGNATURE = {
    "id": "unrecognised-error-lines", "severity": UNRECOGNISED, "profile_fields": [],
    "cause": "lines at error level that no known failure recognises: the rig may be failing in a way this doctor "
             "does not know",
    "fix": "read the first line and the log around it (journalctl -u rigforge-engine, journalctl -k); when it is a "
           "failure, add its class to inventory/known-failures.yaml",
}


@dataclass(frozen=True)
class Hit:
    """One signature found in a log: its first matching line and how many lines matched.

    + signature: the signature's fields (id, severity, cause, fix, profile_fields, source...)
    + where: the log it was found in (kernel, engine, startup, bench)
    + line: the first matching line, cut at MAX_LINE characters
    + count: matching lines in that log
    + found: the pattern's named groups in that line (Xid 154's ``action``: the recovery action it carries)
    """

    signature: Mapping[str, Any]
    where: str
    line: str
    count: int
    found: Mapping[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """The signature's id."""
        return str(self.signature["id"])

    @property
    def severity(self) -> str:
        """blocking, fail, warn, or unrecognised (error lines no signature knows); a value the line carries may set
        it (``severity_by``: Xid 154's action ``None`` is warn)."""
        for name, table in (self.signature.get("severity_by") or {}).items():
            if self.found.get(name) in table:
                return str(table[self.found[name]])
        return str(self.signature["severity"])

    @property
    def fix(self) -> str:
        """The signature's fix, with what the line carries filled in (``{action}``: Xid 154's recovery action)."""
        text = str(self.signature["fix"])
        for name, value in self.found.items():
            text = text.replace("{" + name + "}", value)
        return text


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
        matching = [(line, found) for line in candidates if (found := pattern.search(line))]
        if matching:
            line, found = matching[0]
            groups = {name: value for name, value in found.groupdict().items() if value}
            hits.append(Hit(signature, where, line.strip()[:MAX_LINE], len(matching), groups))
    return hits


def unrecognised_hit(signatures: Iterable[Mapping[str, Any]], lines: Sequence[str], where: str) -> Hit | None:
    """The lines at error level in ``where`` that no signature shown there recognises, as one hit (or None).

    + signatures: the signatures as mappings
    + lines: the log's lines, oldest first
    + where: kernel, engine or startup (the bench's lines have a verdict of their own: never unrecognised)

    >>> unrecognised_hit([], ["ok", "RuntimeError: something new"], "engine").count
    1
    """
    place = ERROR_PLACE.get(where)
    if place is None:
        return None
    error_line = re.compile(ERROR_LINES[place])
    errors = [line for line in held_lines(lines, ERROR_WORDS[place]) if error_line.search(line)]
    if not errors:
        return None
    # a signature recognises a line as match_lines does: the line holds one of its needles and its pattern matches
    # (the needle's substring test first: most error lines hold no signature's needle)
    known = [(needles_of(s), re.compile(s["pattern"])) for s in signatures
             if any(ERROR_PLACE.get(w) == place for w in s["where"])]
    unknown = [line for line in errors
               if not any(any(word in line for word in words) and pattern.search(line) for words, pattern in known)]
    if not unknown:
        return None
    return Hit(UNRECOGNISED_SIGNATURE, where, unknown[0].strip()[:MAX_LINE], len(unknown))


def unrecognised_counts(signatures: Sequence[Mapping[str, Any]], logs: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """How many lines at error level no signature recognises, by log: what the health-metrics collector adds to its
    ``rigforge_unrecognised_error_lines_total`` counter each run (every such line counts, explained or not).

    + signatures: the signatures as mappings
    + logs: ``kernel`` and ``engine`` lines (others are ignored: the bench's lines have a verdict of their own)

    >>> unrecognised_counts([], {"kernel": ["ok"], "engine": ["RuntimeError: something new", "fine"]})
    {'kernel': 0, 'engine': 1}
    """
    counts = {}
    for where in ("kernel", "engine"):
        hit = unrecognised_hit(signatures, list(logs.get(where, ())), where)
        counts[where] = hit.count if hit is not None else 0
    return counts


def explained(hits: Iterable[Hit]) -> bool:
    """True when a known failure of severity fail or blocking explains a log (its other error lines follow it); a
    signature that says only that something failed (``explains: false``: a unit's result, an engine core that died)
    explains nothing: the line that says why is still shown."""
    return any(hit.severity in ("fail", "blocking") and hit.signature.get("explains", True) for hit in hits)


def shown(hits: Sequence[Hit]) -> list[Hit]:
    """The hits a report shows for one log: a signature that says only that something failed (``explains: false``:
    a unit's failed result, an engine core that died) is left out when another known failure explains the log.

    >>> died = Hit({"id": "d", "severity": "fail", "explains": False}, "engine", "core died", 1)
    >>> cause = Hit({"id": "c", "severity": "fail"}, "engine", "out of memory", 1)
    >>> [hit.id for hit in shown([died, cause])], [hit.id for hit in shown([died])]
    (['c'], ['d'])
    """
    if not explained(hits):
        return list(hits)
    return [hit for hit in hits if hit.signature.get("explains", True)]


def hit_line(hit: Hit) -> str:
    """The one line that names a hit: id, severity, cause and fix.

    >>> hit_line(Hit({"id": "x", "severity": "fail", "cause": "c", "fix": "f"}, "startup", "l", 1))
    'known failure x (fail): c; fix: f'
    """
    if hit.severity == UNRECOGNISED:
        return f"{hit.count} unrecognised error line(s) ({hit.severity}), first: {hit.line}; {hit.fix}"
    return f"known failure {hit.id} ({hit.severity}): {hit.signature['cause']}; fix: {hit.fix}"


def main(signatures: Sequence[Mapping[str, Any]], argv: Sequence[str]) -> int:
    """On the rig: print one line per known failure in a journal file; exit 0 whatever it finds.

    + signatures: the signatures as mappings (the health-wait script embeds them as JSON)
    + argv: ``JOURNAL_FILE [--hung]``
    """
    path, hung = argv[0], "--hung" in argv[1:]
    with open(path, encoding="utf-8", errors="replace") as journal:
        lines = journal.read().splitlines()
    hits = match_lines(signatures, lines, "startup", hung=hung)
    unknown = unrecognised_hit(signatures, lines, "startup")
    for hit in shown(hits) + ([unknown] if unknown and not explained(hits) else []):
        print(hit_line(hit))
    return 0

