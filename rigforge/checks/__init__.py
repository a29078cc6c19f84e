"""Checks: is this host what its profile says? One source of truth for three readers.

Each check is a pure function ``(Profile, HostFacts) -> Check``: expected (from the profile), found
(from the facts), verdict (ok / warn / fail), the fix (from rig-facts) and whether it blocks a
deploy. ``deploys/preflight.py`` prints them as a table, ``tests/verify/test_gpus.py`` asserts
them, and ``deploys/full.py`` stops a host on a blocking failure before changing anything.

Verdicts: ``ok`` matches; ``warn`` differs but the deploy fixes it (``deploy_fixes``), or is advice
only; ``fail`` differs and matters. Blocking failures are the ones the deploy cannot fix: missing or
degraded hardware, BAR1 (BIOS), the GPU model, the topology class, a kernel log that shows a wedged
GPU or link (``known-failures``: one row per known failure in the kernel log and the engine journal), and
Secure Boot on with DKMS's signing key not enrolled (``secure-boot``: enrolling needs the console).

May import: facts, recipes, serving, known_failures, profile.
"""

from rigforge.checks.model import Check, HostFacts, Verdict
from rigforge.checks.run import (
    CHECK_NAMES,
    FACT_SOURCES,
    NO_GPU,
    blocking_failures,
    gather_facts,
    run_checks,
    summary,
)
from rigforge.checks.table import table_lines, verdict_text

__all__ = [
    "CHECK_NAMES",
    "FACT_SOURCES",
    "NO_GPU",
    "Check",
    "HostFacts",
    "Verdict",
    "blocking_failures",
    "gather_facts",
    "run_checks",
    "summary",
    "table_lines",
    "verdict_text",
]
