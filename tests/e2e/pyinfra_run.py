"""Run the pyinfra CLI against sandbox hosts, as a user would, and read its JSON plan.

``pyinfra --dry --json INVENTORY DEPLOY`` prints one line on stdout (pyinfra 3.10, checked on
sandbox hosts)::

    {"plan": [{"op_hash": "e6a1...", "name": "marker line", "names": ["marker line"], "args": [],
               "hosts_with_change": ["rig1", "rig2"], "hosts_with_conditional_change": []}, ...],
     "results": null}

Operations gated with ``_if=`` appear under ``hosts_with_conditional_change`` even when nothing would
run. A real run (``-y --json``) prints the plan (its ``hosts_with_change`` then empty) and
``"results": {"operations": [{"op_hash", "name", "names", "args", "hosts": 2, "success": [changed
hosts], "error": [...], "no_change": [...]}], "totals": {"hosts", "success", "error", "no_change"},
"failed_hosts": [...]}``.

Example::

    result = run_pyinfra(inventory, "deploys/full.py")
    assert_no_changes(inventory, "deploys/full.py")
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rigforge.operations.lock import LOCK_OPERATION_NAMES

REPO_ROOT = Path(__file__).resolve().parents[2]
PYINFRA_TIMEOUT_S = 1800


@dataclass
class PyinfraResult:
    """Outcome of one pyinfra CLI run: exit status, output, and the parsed JSON (None without --json)."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    data: dict | None = None
    plan: list[dict] = field(default_factory=list)


def parse_json_output(stdout: str) -> dict | None:
    """Return the JSON document pyinfra printed last on stdout, or None when there is none.

    Print calls inside a deploy also land on stdout, before the JSON; they are skipped.
    """
    text = stdout.strip()
    start = len(text)
    while (start := text.rfind("{", 0, start)) != -1:
        # pyinfra prints the document with its opening brace first on a line.
        if start == 0 or text[start - 1] == "\n":
            try:
                return json.loads(text[start:])
            except json.JSONDecodeError:
                pass
    return None


def pyinfra_command(inventory: Path | str, deploy: Path | str, *args: str, dry: bool = False) -> list[str]:
    """Return the pyinfra CLI command line: ``--dry --json`` for checks, ``-y --json`` for real runs."""
    mode = ["--dry", "--json"] if dry else ["-y", "--json"]
    return [sys.executable, "-m", "pyinfra", *mode, str(inventory), str(deploy), *args]


def run_pyinfra(inventory: Path | str, deploy: Path | str, *args: str, dry: bool = False,
                check: bool = True, timeout: float = PYINFRA_TIMEOUT_S,
                env: Mapping[str, str | None] | None = None) -> PyinfraResult:
    """Run the pyinfra CLI from the repository root and return its result.

    + inventory: inventory .py file (e.g. written by the ``sandbox`` fixture)
    + deploy: deploy file or operation (e.g. ``deploys/full.py`` or ``server.shell``)
    + args: more CLI arguments (operation arguments, ``--limit``, ``--data k=v``)
    + dry: ``--dry --json``: plan only, the host is not changed
    + check: raise AssertionError with the output when pyinfra exits non-zero
    + env: environment variables for this run (``HF_TOKEN``); None as a value removes the variable
    """
    cmd = pyinfra_command(inventory, deploy, *args, dry=dry)
    # pyinfra reads the deploy relative to its working directory; roles are imported from the repo root.
    merged = {**os.environ, **(env or {}),
              "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    run_env = {name: value for name, value in merged.items() if value is not None}
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=run_env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    data = parse_json_output(proc.stdout)
    result = PyinfraResult(cmd, proc.returncode, proc.stdout, proc.stderr, data,
                           (data or {}).get("plan") or [])
    if check and proc.returncode != 0:
        raise AssertionError(f"pyinfra exited {proc.returncode}: {' '.join(cmd)}\n"
                             f"--- stderr (tail) ---\n{proc.stderr[-6000:]}\n"
                             f"--- stdout (tail) ---\n{proc.stdout[-3000:]}")
    return result


def changed_ops(result: PyinfraResult) -> list[str]:
    """Return the names of the operations that changed (real run) or would change (dry run) a host.

    After a real run pyinfra's plan lists no ``hosts_with_change`` any more (it is computed after
    the run), so the results' ``success`` lists (changed hosts; unchanged ones are ``no_change``) count.
    The deploy lock's take and release run on every executed deploy and change nothing of the rig: not counted.
    """
    results = (result.data or {}).get("results")
    if results:
        return [op["name"] for op in results["operations"]
                if op["success"] and not any(name in LOCK_OPERATION_NAMES for name in op.get("names", [op["name"]]))]
    return [op["name"] for op in result.plan if op.get("hosts_with_change")]


def assert_no_changes(inventory: Path | str, deploy: Path | str, *args: str,
                      env: Mapping[str, str | None] | None = None) -> PyinfraResult:
    """Plan ``deploy`` with ``--dry --json`` and assert that no operation would change any host.

    Operations gated with ``_if=`` are listed by pyinfra under ``hosts_with_conditional_change``;
    they run only when their gate changes, so an empty ``hosts_with_change`` everywhere is the test.
    """
    result = run_pyinfra(inventory, deploy, *args, dry=True, env=env)
    assert result.data is not None, f"pyinfra printed no JSON plan:\n{result.stdout[-3000:]}"
    offending = [f"{op['name']} on {', '.join(op['hosts_with_change'])}"
                 for op in result.plan if op.get("hosts_with_change")]
    assert not offending, "operations would change on a second run:\n  " + "\n  ".join(offending)
    return result
