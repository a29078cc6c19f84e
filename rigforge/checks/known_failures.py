"""The known-failures check: the kernel log and the engine journal matched against the known signatures.

One row per signature found (``known-failures``: its id, how many lines, the first line; the fix from
inventory/known-failures.yaml), or one ``ok`` row when none is. A kernel-level signature that means a
wedged GPU or link (``severity: blocking``) blocks a deploy: no deploy brings the GPU back. Lines at error
level that no signature recognises are a row of their own (``unrecognised error lines``: how many, the first,
the log), unless a failure the doctor knows already explains that log: an error is never reported as ``none``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rigforge.checks.model import Check, HostFacts, advice, failed, ok
from rigforge.facts.logs import NO_LOGS, FailureLogs
from rigforge.known_failures import Hit, match_lines, signature_data
from rigforge.known_failures.match import UNRECOGNISED, explained, shown, unrecognised_hit
from rigforge.profile import Profile

NAME = "known-failures"
EXPECTED = "no known failure in the kernel log, engine journal or bench lines"
#: Which log each fact section is, and the signature places matched in it.
_LOGS = (("kernel", ("kernel",)), ("engine", ("engine", "startup")), ("bench", ("bench",)))
#: How a row names the log a hit came from.
LOG_NAMES = {"kernel": "kernel log", "engine": "engine journal", "startup": "engine journal",
             "bench": "bench's journal lines"}


def find_known_failures(logs: FailureLogs, signatures: Iterable[Mapping[str, Any]] | None = None) -> list[Hit]:
    """Every signature found in the logs: kernel-log ones first, then the engine's, then the bench's; after each
    log's hits, its unrecognised error lines when no fail or blocking hit explains them (a hit that says only that
    something failed, a unit's result, is shown when nothing else explains its log).

    + logs: the KnownFailureLogs fact
    + signatures: plain signature mappings (default: the project's)

    Example: ``find_known_failures(FailureLogs(("... NVRM: Xid (PCI:0000:41:00): 79, ...",), ()))``
    """
    data = list(signatures if signatures is not None else signature_data())
    hits: list[Hit] = []
    seen: set[str] = set()
    for section, places in _LOGS:
        lines = getattr(logs, section)
        found: list[Hit] = []
        for place in places:
            for hit in match_lines(data, lines, place):
                if hit.id not in seen:  # a signature shown in both engine and startup counts once
                    seen.add(hit.id)
                    found.append(hit)
        unknown = unrecognised_hit(data, lines, places[0])
        hits += shown(found) + ([unknown] if unknown is not None and not explained(found) else [])
    return hits


def hit_check(hit: Hit) -> Check:
    """The table row of one hit: fail (blocking for a wedged GPU or link), warn, or warn for unrecognised lines."""
    log = LOG_NAMES[hit.where]
    times = f" ({hit.count} lines)" if hit.count > 1 else ""
    found = f"{hit.id} in the {log}{times}: {hit.line}"
    fix = f"{hit.signature['cause']}: {hit.fix}"
    if hit.severity == UNRECOGNISED:
        return advice(NAME, EXPECTED, f"unrecognised error lines in the {log} ({hit.count}), first: {hit.line}", fix)
    if hit.severity == "warn":
        return advice(NAME, EXPECTED, found, fix)
    return failed(NAME, EXPECTED, found, fix, blocking=hit.severity == "blocking")


def check_known_failures(profile: Profile, facts: HostFacts) -> list[Check]:
    """One row per known failure found, or one ok row (profile-independent: a log says what it says)."""
    hits = find_known_failures(facts.failure_logs or NO_LOGS)
    if not hits:
        return [ok(NAME, EXPECTED, "none (kernel log since boot, engine journal and bench lines since its last "
                                   "start)")]
    return [hit_check(hit) for hit in hits]
