"""A/A tournaments on a sandbox host: recipes identical to the start must never be judged better or worse, while
``one-thread`` (really ~40 % slower decode on 2 cores) is still found slower (no asserting: it prints).

Starts one sandbox host (its own state directory and host name), serves the sandbox profile with three more
recipes, ``aa1``..``aa3``, that change nothing (only their names differ from ``default``), then runs
``deploys/recipes.py --data recipes=default,aa1,aa2,aa3,one-thread --data keep=best`` N times with the sandbox
profile's own bench (3 cells, 5 s, 2 repeats; ``--one-cell``: C=1 only, 3 repeats, for a loaded machine). For
each tournament it prints the report's table, the start's drift, what measuring the start again cost beside one
recipe's bench, the more repeats spent, and one line: the verdicts of the identical recipes and of one-thread,
and the recipe the rig ended on.

    .venv/bin/python measurements/recipes_aa.py [--tournaments 3] [--recipes default,aa1,aa2,one-thread] [--one-cell]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rigforge.sandbox import down, exec_in, up  # noqa: E402
from rigforge.sandbox.model import ensure_gemma  # noqa: E402
from tests.e2e.conftest import inventory_source  # noqa: E402
from tests.e2e.pyinfra_run import run_pyinfra  # noqa: E402

HOST = "recipeaa"
IDENTICAL = ("aa1", "aa2", "aa3")
SAME_AS_DEFAULT = {"description": "identical to default: no field changed, only the name (an A/A test)",
                   "source": "measurements/recipes_aa.py"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tournaments", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="leave the sandbox host running")
    parser.add_argument("--recipes", default=",".join(("default", *IDENTICAL, "one-thread")),
                        help="the recipes, the start first (default: default, aa1, aa2, aa3, one-thread)")
    parser.add_argument("--one-cell", action="store_true",
                        help="bench C=1 only, 3 repeats (a loaded machine: a third of the time per bench)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rigforge-recipes-aa-"))
    state, results = work / "sandbox", work / "results"
    model = ensure_gemma(REPO_ROOT / ".cache" / "models")
    overrides: dict = {"model": {"local_path": str(model)},
                       "engine": {"recipes": {name: SAME_AS_DEFAULT for name in IDENTICAL}}}
    if args.one_cell:
        overrides["bench"] = {"concurrency": [1], "repeats": 3}
    inventory = work / "inventory.py"
    inventory.write_text(inventory_source(state, [HOST], "sandbox", overrides))
    env = {"RIGFORGE_RESULTS_DIR": str(results)}
    names = args.recipes
    identical = [name for name in names.split(",") if name in IDENTICAL]
    host = up([HOST], state).host(HOST)
    summary = []
    try:
        run_pyinfra(inventory, "deploys/serve.py", env=env)
        for number in range(1, args.tournaments + 1):
            started = time.monotonic()
            run_pyinfra(inventory, "deploys/recipes.py", "--data", f"recipes={names}", "--data", "keep=best", env=env)
            took = time.monotonic() - started
            folder = sorted((results / HOST).glob("recipes-*"))[-1]
            report = json.loads((folder / "report.json").read_text())
            verdicts = {entry["recipe"]: entry["verdict"] for entry in report["recipes"]}
            markdown = (folder / "report.md").read_text()
            print(f"\n## Tournament {number} ({took:.0f} s): {folder}\n", flush=True)
            print("\n".join(line for line in markdown.splitlines() if line.startswith(("|", "Drift", "- ", "Best"))))
            ended = json.loads(exec_in(host, "cat /etc/rigforge/profile.json").stdout)["recipe"]["name"]
            summary.append(f"| {number} | " + " | ".join(verdicts[name] for name in identical)
                           + f" | {verdicts['one-thread']} | {report['best'] or 'none'} | {ended} | {took:.0f} s |")
    finally:
        if not args.keep:
            down([HOST], state)
    print("\n| tournament | " + " | ".join(identical) + " | one-thread | best | rig ended on | wall time |")
    print("|---|" + "---|" * (len(identical) + 4))
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
