"""Finding bench results kept on the controller under ``results/<host>/<stamp>/``.

Every run directory holds ``result.json`` (the rig's result, with the versions it ran on in
``metadata``); stamps are UTC times (``20261122T031455Z``) so name order is time order.
``results/<host>/latest`` is a link to the newest and is never listed twice.

Example::

    runs = find_results(Path("results"), "rig2x-a")
    before = last_before(Path("results"), "rig2x-a", lambda result: result["metadata"]["driver_version"] != "595.45.04")
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULT_FILE = "result.json"


def load_result(path: Path) -> dict[str, Any]:
    """A result as a dict, from a run directory or its ``result.json``.

    + path: ``results/<host>/<stamp>`` or ``results/<host>/<stamp>/result.json``
    """
    file = path / RESULT_FILE if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no bench result here (expected a run directory holding {RESULT_FILE})")
    return json.loads(file.read_text(encoding="utf-8"))


def find_results(root: Path, host: str) -> list[Path]:
    """Run directories of ``host`` that hold a result, oldest first (the ``latest`` link is skipped).

    + root: the results folder (``results``)
    + host: inventory name of the rig
    """
    host_dir = root / host
    if not host_dir.is_dir():
        return []
    runs = [entry for entry in host_dir.iterdir() if not entry.is_symlink() and (entry / RESULT_FILE).is_file()]
    return sorted(runs, key=lambda entry: entry.name)


def last_before(root: Path, host: str, predicate: Callable[[dict[str, Any]], bool],
                before: Path | None = None) -> Path | None:
    """The newest run (older than ``before``, default: older than the newest run) whose result matches.

    + predicate: called with each loaded result, newest first
    + before: only runs older than this run directory count; None: the newest run itself is excluded
    """
    runs = find_results(root, host)
    runs = runs[:-1] if before is None else [run for run in runs if run.name < before.name]
    for run in reversed(runs):
        if predicate(load_result(run)):
            return run
    return None


def driver_of(result: dict[str, Any]) -> str | None:
    """The NVIDIA driver version a result ran on (``metadata.driver_version``), None on a CPU-only rig."""
    return (result.get("metadata") or {}).get("driver_version")


def last_before_driver_change(root: Path, host: str) -> tuple[Path, Path] | None:
    """(before, latest): the newest run and the last run before it on another driver version.

    This is "latest vs the last one before the update"; None when the host has no such pair.
    """
    runs = find_results(root, host)
    if not runs:
        return None
    latest = runs[-1]
    current = driver_of(load_result(latest))
    before = last_before(root, host, lambda result: driver_of(result) != current, before=latest)
    return (before, latest) if before is not None else None
