"""The journal part of the rig's health metrics: one journalctl read after the last run's cursor, counted.

Standard library only: installed beside ``health_metrics.py`` on the rig (``/opt/rigforge/lib/monitoring``).
This boot's kernel, engine-unit and bench entries after the cursor are matched against the known-failure
signatures by the project's own matcher (installed beside this file), and every kernel Xid is counted per GPU
and code (``gpu_errors.count_xids``); the counts since boot live in the collector's state.

    update = read_journal(config, state, 19.0)   # -> {"cursor": ..., "lines": {...}, "xids": {...}}
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

try:  # the repository (tests); on the rig the modules lie beside this file
    from rigforge.remote import gpu_errors
    from rigforge.remote.bounded import PartCut, run_bounded
    from rigforge.remote.gpu_health import Sample
except ImportError:  # pragma: no cover - the rig's layout
    import gpu_errors  # type: ignore[no-redef]
    from bounded import PartCut, run_bounded  # type: ignore[no-redef]
    from gpu_health import Sample  # type: ignore[no-redef]

KERNEL_IDENT = "kernel"


def journal_argv(unit: str, bench_ident: str, cursor: str | None) -> list[str]:
    """One journalctl read: this boot's kernel, engine-unit and bench entries after the cursor, as JSON."""
    argv = ["journalctl", "-b", "--no-pager", "-q", "-o", "json", "--output-fields=MESSAGE,SYSLOG_IDENTIFIER"]
    if cursor:
        argv.append(f"--after-cursor={cursor}")
    return [*argv, f"_SYSTEMD_UNIT={unit}", "+", f"SYSLOG_IDENTIFIER={KERNEL_IDENT}", "+",
            f"SYSLOG_IDENTIFIER={bench_ident}"]


def parse_journal(text: str, bench_ident: str) -> tuple[dict[str, list[str]], str | None, list[tuple[str, float]]]:
    """journalctl's JSON lines -> lines per log (kernel, engine, bench), the last entry's cursor, and the kernel's
    lines with when they were logged (unix seconds)."""
    logs: dict[str, list[str]] = {"kernel": [], "engine": [], "bench": []}
    kernel: list[tuple[str, float]] = []
    cursor = None
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        cursor = entry.get("__CURSOR", cursor)
        message = entry.get("MESSAGE")
        if isinstance(message, list):  # journald sends a message that is not UTF-8 as its bytes
            message = bytes(message).decode("utf-8", "replace")
        if not isinstance(message, str):
            continue
        ident = entry.get("SYSLOG_IDENTIFIER")
        where = "kernel" if ident == KERNEL_IDENT else "bench" if ident == bench_ident else "engine"
        logs[where].append(message)
        if where == "kernel":
            stamp = str(entry.get("__REALTIME_TIMESTAMP", ""))
            kernel.append((message, int(stamp) / 1e6 if stamp.isdigit() else time.time()))
    return logs, cursor, kernel


def count_known_failures(matcher: Any, signatures: Sequence[Mapping[str, Any]],
                         logs: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Lines of each signature in the logs; an engine line counts once though engine and startup show it."""
    counts: dict[str, int] = {}
    for section, places in (("kernel", ("kernel",)), ("engine", ("engine", "startup")), ("bench", ("bench",))):
        seen: set[str] = set()
        for place in places:
            for hit in matcher.match_lines(signatures, list(logs.get(section, ())), place):
                if hit.id not in seen:
                    seen.add(hit.id)
                    counts[hit.id] = counts.get(hit.id, 0) + hit.count
    return counts


def known_failure_samples(signatures: Sequence[Mapping[str, Any]], total: Mapping[str, int]) -> list[Sample]:
    """Every signature's count since boot, 0 included: a series that exists before its first line shows the rise."""
    return [("rigforge_known_failure_lines_total", {"id": sig["id"], "failure_severity": sig["severity"]},
             float(total.get(sig["id"], 0))) for sig in signatures]


def read_journal(config: Mapping[str, Any], state: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
    """The journal part: the entries after the cursor, counted -> the state's new cursor, counts and Xids.

    + config: the collector's (engine unit, bench identifier, matcher, signatures)
    + state: this boot's cursor, counts and Xids so far (not changed: the new ones are returned)
    + timeout_s: how long journalctl may take
    """
    sys.path.insert(0, config["matcher_dir"])
    matcher = importlib.import_module(config["matcher_module"])
    done = run_bounded(journal_argv(config["engine"]["unit"], config["bench_ident"], state["cursor"]),
                       timeout_s)
    if done is None:
        raise PartCut("journalctl did not answer")
    logs, cursor, kernel = parse_journal(done.stdout, config["bench_ident"])
    lines = dict(state["lines"])
    for signature_id, count in count_known_failures(matcher, config["signatures"], logs).items():
        lines[signature_id] = lines.get(signature_id, 0) + count
    xids = {key: list(value) for key, value in state.get("xids", {}).items()}
    gpu_errors.count_xids(kernel, xids)
    unrecognised = dict(state.get("unrecognised", {}))
    for log, count in matcher.unrecognised_counts(config["signatures"], logs).items():
        unrecognised[log] = unrecognised.get(log, 0) + count
    return {"cursor": cursor or state["cursor"], "lines": lines, "xids": xids, "unrecognised": unrecognised}
