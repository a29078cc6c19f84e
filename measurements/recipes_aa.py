"""A/A tournaments on a sandbox host: recipes identical to the start must never be judged better or worse, and should
mostly be called ``same``, while ``one-thread`` (really ~40 % slower decode on 2 cores) is still found slower (no
asserting: it prints).

Starts one sandbox host (its own state directory and host name), serves the sandbox profile with recipes ``aa1``,
``aa2`` (``--identical N``: more) that change nothing (only their names differ from ``default``), then runs
``deploys/recipes.py --data recipes=default,aa1,aa2,one-thread --data keep=best`` N times with the sandbox profile's
engine starts (``bench.verdicts.starts``: 3, interleaved rounds; then, within its ``decide_budget_s``, extra
rounds of every recipe without a claim and a second look, the false-claim rate split O'Brien-Fleming-like:
rigforge/recipes/rounds.py). ``--one-cell`` benches C=1 only (3 s windows, 2 repeats a start: the starts decide).
``--starts`` and ``--budget`` override k and the budget (``--starts 8 --budget 0``: one look at 8 starts a side,
which measures the start-to-start spread). Each tournament's line says the load average (1 min) before and after
it and the 5 min one after it: run it where no other heavy job runs for a quiet machine. No
variance is injected: the machine's own load (other work on its 2 cores) is the drift a verdict
must survive. Each tournament holds the shared e2e lock (``--lock``) while it runs and lets it go between
tournaments, so other sandbox runs are not held for the whole series.

For each tournament it prints the report's table and engine starts, and one line: the verdicts of the identical
recipes and of one-thread, the starts a side they took, the recipe the rig ended on and the wall time; at the end,
the table of all tournaments and the rate of ``same`` among the identical recipes' verdicts.

    .venv/bin/python measurements/recipes_aa.py [--tournaments 5] [--identical 2] [--one-cell] [--identical-only]
        [--starts K] [--budget S]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rigforge.sandbox import down, exec_in, up  # noqa: E402
from rigforge.sandbox.docker import file_lock  # noqa: E402
from rigforge.sandbox.model import ensure_gemma  # noqa: E402
from tests.bench_support.synthetic import ONE_CELL  # noqa: E402
from tests.e2e.conftest import inventory_source  # noqa: E402
from tests.e2e.pyinfra_run import run_pyinfra  # noqa: E402

HOST = "recipeaa"
SAME_AS_DEFAULT = {"description": "identical to default: no field changed, only the name (an A/A test)",
                   "source": "measurements/recipes_aa.py"}


def starts_of(report: dict, name: str) -> int:
    """How many engine starts a recipe was measured in."""
    return next(len(entry["primary_per_start"]) for entry in report["recipes"] if entry["recipe"] == name)


def per_start(report: dict, name: str) -> list[float]:
    """A recipe's primary value in each of its engine starts, in the order measured."""
    return next(entry["primary_per_start"] for entry in report["recipes"] if entry["recipe"] == name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tournaments", type=int, default=5)
    parser.add_argument("--identical", type=int, default=2, help="recipes identical to default (aa1..aaN)")
    parser.add_argument("--one-cell", action="store_true", help="bench C=1 only, 3 s windows, 2 repeats a start")
    parser.add_argument("--identical-only", action="store_true",
                        help="leave one-thread out (a third fewer starts on a loaded machine; the e2e test has it)")
    parser.add_argument("--starts", type=int, help="engine starts a recipe (default: the profile's bench.verdicts)")
    parser.add_argument("--budget", type=int, help="seconds of extra starts (default: the profile's decide_budget_s)")
    parser.add_argument("--lock", type=Path, default=Path("/tmp/rigforge-e2e.lock"))
    parser.add_argument("--keep", action="store_true", help="leave the sandbox host running")
    args = parser.parse_args()
    identical = [f"aa{number}" for number in range(1, args.identical + 1)]
    work = Path(tempfile.mkdtemp(prefix="rigforge-recipes-aa-"))
    state, results = work / "sandbox", work / "results"
    model = ensure_gemma(REPO_ROOT / ".cache" / "models")
    overrides: dict = {"model": {"local_path": str(model)},
                       "engine": {"recipes": {name: SAME_AS_DEFAULT for name in identical}}}
    if args.one_cell:
        overrides["bench"] = dict(ONE_CELL)
    verdicts = {key: value for key, value in (("starts", args.starts), ("decide_budget_s", args.budget))
                if value is not None}
    if verdicts:
        overrides.setdefault("bench", {})["verdicts"] = verdicts
    inventory = work / "inventory.py"
    inventory.write_text(inventory_source(state, [HOST], "sandbox", overrides))
    env = {"RIGFORGE_RESULTS_DIR": str(results)}
    others = [] if args.identical_only else ["one-thread"]
    names = ",".join(["default", *identical, *others])
    rows, verdicts_of_identical = [], []
    try:
        with file_lock(args.lock):
            host = up([HOST], state).host(HOST)
            run_pyinfra(inventory, "deploys/serve.py", env=env)
        for number in range(1, args.tournaments + 1):
            with file_lock(args.lock):
                load_before = os.getloadavg()[0]
                started = time.monotonic()
                run_pyinfra(inventory, "deploys/recipes.py", "--data", f"recipes={names}", "--data", "keep=best",
                            env=env)
                took = time.monotonic() - started
                load = f"{load_before:.1f} / {os.getloadavg()[0]:.1f} / {os.getloadavg()[1]:.1f}"
                ended = json.loads(exec_in(host, "cat /etc/rigforge/profile.json").stdout)["recipe"]["name"]
            folder = sorted((results / HOST).glob("recipes-*"))[-1]
            report = json.loads((folder / "report.json").read_text())
            verdicts = {entry["recipe"]: entry["verdict"] for entry in report["recipes"]}
            verdicts_of_identical += [verdicts[name] for name in identical]
            markdown = (folder / "report.md").read_text()
            print(f"\n## Tournament {number} ({took:.0f} s): {folder}\n", flush=True)
            print("\n".join(line for line in markdown.splitlines() if line.startswith(("|", "- ", "Best"))))
            starts = "/".join(str(starts_of(report, name)) for name in ["default", *identical, *others])
            rows.append(f"| {number} | " + " | ".join(verdicts[name] for name in [*identical, *others])
                        + f" | {starts} | {report['best'] or 'none'} | {ended} | {took:.0f} s | {load} |")
            print(rows[-1], flush=True)
            for name in ["default", *identical, *others]:
                print(f"{name} decode per start: {per_start(report, name)}", flush=True)
    finally:
        if not args.keep:
            with file_lock(args.lock):
                down([HOST], state)
    measured = ["default", *identical, *others]
    print("\n| tournament | " + " | ".join(measured[1:]) + f" | starts ({'/'.join(measured)}) | best | rig ended on "
          "| wall time | load (1 min before / after, 5 min after) |")
    print("|---|" + "---|" * (len(identical) + len(others) + 5))
    print("\n".join(rows))
    same = sum(verdict == "same" for verdict in verdicts_of_identical)
    claimed = sum(verdict in ("better", "worse (regression)") for verdict in verdicts_of_identical)
    print(f"\nidentical recipes: {same} of {len(verdicts_of_identical)} same, {claimed} better/worse", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
