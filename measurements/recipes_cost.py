"""What a recipe experiment costs beside its parts, and that switching back to a recipe builds nothing (no asserting).

Starts one sandbox host (its own state directory and host name), serves the sandbox profile, then times, in
one run of this script:

- the parts: for each of N recipes, ``deploys/serve.py --data recipe=R`` (switch and health wait) and
  ``deploys/bench.py`` (the bench of the recipe the rig now runs), each a pyinfra run of its own;
- the experiment: ``deploys/recipes.py --data recipes=R1,...,RN`` (the same N recipes, the starting one first);
- the switch back: ``deploys/serve.py --data recipe=R1`` once the rig runs another recipe, with the operations
  pyinfra reports changed: only the unit and its restart, no engine install, image or weights step.

It prints the experiment's wall time beside N x (switch + health + bench) and their ratio (the issue's bound is
1.10), and the switch back's changed operations. The bench is cut down to one cell (as the e2e test does) so
the run takes minutes; the ratio is about the experiment's own overhead, which does not grow with the cells.

    .venv/bin/python measurements/recipes_cost.py [--recipes default,one-thread,one-slot] [--keep]
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

from rigforge.sandbox import down, up  # noqa: E402
from rigforge.sandbox.model import ensure_gemma  # noqa: E402
from tests.e2e.conftest import inventory_source  # noqa: E402
from tests.e2e.pyinfra_run import PyinfraResult, changed_ops, run_pyinfra  # noqa: E402

# One engine start a recipe: the parts are one switch and one bench each (a tournament of k starts costs k times).
BENCH = {"concurrency": [1], "input_tokens": [128], "cell_seconds": 1.5, "repeats": 2, "warmup_requests": 1,
         "verdicts": {"starts": 1, "decide_budget_s": 0}}
HOST = "recipecost"


def pyinfra(inventory: Path, deploy: str, *args: str, results: Path) -> tuple[float, PyinfraResult]:
    """Run one deploy with ``-y --json`` (as the e2e tests do); its wall time and result."""
    started = time.monotonic()
    result = run_pyinfra(inventory, deploy, *args, env={"RIGFORGE_RESULTS_DIR": str(results)})
    return time.monotonic() - started, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", default="default,one-thread,one-slot",
                        help="the recipes, the starting one first (default: the three sandbox recipes that measure)")
    parser.add_argument("--keep", action="store_true", help="leave the sandbox host running")
    args = parser.parse_args()
    names = args.recipes.split(",")
    work = Path(tempfile.mkdtemp(prefix="rigforge-recipes-cost-"))
    state = work / "sandbox"
    model = ensure_gemma(REPO_ROOT / ".cache" / "models")
    up([HOST], state)
    try:
        inventory = work / "inventory.py"
        overrides = {"model": {"local_path": str(model)}, "bench": BENCH}
        inventory.write_text(inventory_source(state, [HOST], "sandbox", overrides))
        results = work / "results"
        pyinfra(inventory, "deploys/serve.py", "--data", f"recipe={names[0]}", results=results)
        parts = []
        for name in names:
            switch, _ = pyinfra(inventory, "deploys/serve.py", "--data", f"recipe={name}", results=results)
            bench, _ = pyinfra(inventory, "deploys/bench.py", results=results)
            parts.append((name, switch, bench))
            print(f"part {name}: switch + health {switch:.1f} s, bench {bench:.1f} s", flush=True)
        pyinfra(inventory, "deploys/serve.py", "--data", f"recipe={names[0]}", results=results)
        experiment, _ = pyinfra(inventory, "deploys/recipes.py", "--data", f"recipes={','.join(names)}",
                                results=results)
        pyinfra(inventory, "deploys/serve.py", "--data", f"recipe={names[-1]}", results=results)
        back, switched = pyinfra(inventory, "deploys/serve.py", "--data", f"recipe={names[0]}", results=results)
        changed = changed_ops(switched)
    finally:
        if not args.keep:
            down([HOST], state)
    total = sum(switch + bench for _, switch, bench in parts)
    print("\n| N | parts: sum of switch + health + bench | experiment (deploys/recipes.py) | ratio |")
    print("|---|---|---|---|")
    print(f"| {len(names)} | {total:.1f} s | {experiment:.1f} s | {experiment / total:.2f} (bound 1.10) |")
    print(f"\nswitch back to {names[0]}: {back:.1f} s; changed operations: {json.dumps(changed)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
