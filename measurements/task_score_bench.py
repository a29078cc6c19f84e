"""The task score through the whole bench on a real sandbox host: deploys/bench.py twice with the score switched on.

The questions are the shipped set's (rigforge/quality/word_problems.jsonl), the first ``--questions`` of them. The
first bench records the model's reference (its
task score with it) and, after one engine restart, the A/A; the second is judged against the reference. It prints
the bench's quality lines, each run's score and its comparison. About 5 minutes on a 2-core machine:

    flock /tmp/rigforge-e2e.lock .venv/bin/python measurements/task_score_bench.py [--questions 10]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rigforge.bench_runs.plan import RESULTS_DIR_VARIABLE  # noqa: E402
from rigforge.sandbox import down, up  # noqa: E402
from rigforge.sandbox.model import ensure_gemma  # noqa: E402
from tests.e2e.conftest import inventory_source  # noqa: E402
from tests.e2e.pyinfra_run import run_pyinfra  # noqa: E402


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=10)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="task-score-bench-"))
    name = f"tsbench-{secrets.token_hex(2)}"
    model = ensure_gemma(REPO_ROOT / ".sandbox" / "models")
    os.environ[RESULTS_DIR_VARIABLE] = str(work / "results")
    up([name], work / "state")
    try:
        inventory = work / "inventory.py"
        inventory.write_text(inventory_source(work / "state", [name], "sandbox", {
            "model": {"local_path": str(model)},
            "bench": {"concurrency": [1], "repeats": 1, "quality": {
                "enabled": True, "task_score": {"enabled": True, "questions": args.questions, "concurrency": 2}}}}))
        run_pyinfra(inventory, "deploys/serve.py")
        for bench in (1, 2):
            run = run_pyinfra(inventory, "deploys/bench.py", check=False)
            print(f"--- bench {bench}: pyinfra exit {run.returncode}")
            print("\n".join(line.strip()[:600] for line in run.stderr.splitlines() if "quality" in line))
            result = json.loads(((work / "results" / name / "latest").resolve() / "result.json").read_text())
            quality = result["quality"]
            print("score:", json.dumps((quality.get("task_score") or {}).get("score")))
            print("against the reference:", json.dumps((quality.get("against_reference") or {}).get("task_score")))
    finally:
        down([name], work / "state")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
