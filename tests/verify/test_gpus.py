"""GPUs, driver and kernel of a rig against its profile: the preflight checks, asserted one by one.

The same fact commands and parsers as deploys/preflight.py, run through testinfra's ``host.run``, and
the same check functions (rigforge.checks): each check is one test id. After a deploy every check
must be ok; a warn that is only advice (more memory than planned, no cpufreq in a VM, a branch as
model revision) passes with a warning.

    pytest --hosts=paramiko://rig2x-a tests/verify/test_gpus.py
    pytest --hosts=local:// --profile 2x-pix tests/verify/test_gpus.py     # a machine never provisioned
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from rigforge.checks import CHECK_NAMES, Check, gather_facts, run_checks
from rigforge.profile import Profile


def run_fact(host: Any, fact: type) -> Any:
    """One pyinfra fact through testinfra: its command in sh, its own parser, its default when silent."""
    instance = fact()
    required = instance.requires_command()
    if required and not host.exists(required):
        return instance.default()
    result = host.run(instance.command())
    lines = result.stdout.splitlines()
    # pyinfra gives the default for a failed or silent command, and the parsed output otherwise.
    return instance.process(lines) if result.rc == 0 and lines else instance.default()


@pytest.fixture(scope="module")
def checks(host: Any, profile: Profile) -> dict[str, list[Check]]:
    """Check name -> its rows (known-failures gives one row per known failure found in the logs)."""
    facts = gather_facts(lambda fact: run_fact(host, fact))
    rows: dict[str, list[Check]] = {}
    for check in run_checks(profile, facts):
        rows.setdefault(check.name, []).append(check)
    return rows


@pytest.mark.parametrize("name", CHECK_NAMES)
def test_check(name: str, checks: dict[str, list[Check]]) -> None:
    rows = checks.get(name)
    if not rows:
        pytest.skip(f"{name}: does not apply to this profile or host")
    failing = [check.describe() for check in rows if not check.holds_after_deploy]
    assert not failing, "; ".join(failing)
    for check in rows:
        if check.verdict == "warn":
            warnings.warn(check.describe(), stacklevel=1)
