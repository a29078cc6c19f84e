"""The task score of a sandbox model on a real sandbox host, its A/A, and the llama.cpp answers it reads.

Starts one sandbox host (Debian 12, systemd, SSH), serves the sandbox profile's model with deploys/serve.py, copies
the bench client (rigforge/bench/, as the bench role uploads it) onto the host and runs the task pass
(rigforge/bench/task_score.py) there against the engine on 127.0.0.1, then grades the answers here
(rigforge/quality/tasks.py) and prints the score with its 95 % Wilson interval and the seconds it cost. With
``--passes 2`` the same questions are asked again in the same engine start and once more after a restart of the
engine, and each later pass is compared with the first question by question (the paired test the bench uses):
the A/A, and the smallest drop those questions can call.

``--profile sandbox-instruct`` measures SmolLM2-135M-Instruct on rigforge's one-step problems (the profile's own
task settings); the default, ``sandbox``, Gemma 3 270M on the word problems.

The questions are the shipped set's (rigforge's own word problems, rigforge/quality/word_problems.py; not GSM8K),
asked as the bench asks them (rigforge/quality/tasks.py's ``task_block``), so the sandbox's ``task_score.reason``
rests on a measured number. ``--capture DIR``
also writes three raw ``/v1/completions`` answers (a few-shot question, and the same prompt with 1 and 8 tokens to
answer) for tests/fixtures/quality/. Run it through the e2e lock; a few minutes on a 2-core machine:

    flock /work/coord/e2e.lock .venv/bin/python measurements/task_score_sandbox.py [--profile sandbox-instruct]
        [--questions 50] [--passes 2] [--capture DIR]
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rigforge.bench.task_score import STOP, question_block  # noqa: E402
from rigforge.profile.loader import load_profile  # noqa: E402
from rigforge.quality.tasks import TASK_SETS, compare_scores, score_pass, task_block, task_set  # noqa: E402
from rigforge.sandbox import down, exec_in, up  # noqa: E402
from rigforge.sandbox.model import ensure_gemma, ensure_smollm2  # noqa: E402
from tests.e2e.conftest import inventory_source  # noqa: E402
from tests.e2e.pyinfra_run import run_pyinfra  # noqa: E402


def capture(host: object, prompt: str, model: str, port: int, folder: Path) -> None:
    """Three raw /v1/completions answers of the host's engine, written with where and how they were taken."""
    for name, max_tokens in (("llamacpp_task_answer.json", 256), ("llamacpp_task_cut_short.json", 8),
                             ("llamacpp_task_one_token.json", 1)):
        payload = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stop": STOP}
        script = ("import json, sys, urllib.request; request = urllib.request.Request("
                  f"'http://127.0.0.1:{port}/v1/completions', data=sys.stdin.read().encode(), "
                  "headers={'Content-Type': 'application/json'}); "
                  "print(urllib.request.urlopen(request).read().decode())")
        body = exec_in(host, ["python3", "-c", script], input_text=json.dumps(payload)).stdout  # type: ignore[arg-type]
        (folder / name).write_text(json.dumps({"_captured": f"sandbox host, deploys/serve.py with the sandbox "
                                                            f"profile; POST /v1/completions max_tokens={max_tokens}",
                                               "request": payload, "response": json.loads(body)}, indent=1) + "\n")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="sandbox", choices=["sandbox", "sandbox-instruct"])
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument("--passes", type=int, default=1, help="2: an A/A in the same start and after a restart")
    parser.add_argument("--capture", type=Path, help="also write raw llama.cpp answers here")
    args = parser.parse_args(argv)
    profile = load_profile(args.profile)
    settings = profile.bench.quality.task_score.model_copy(update={"enabled": True, "questions": args.questions})
    if args.profile == "sandbox":
        settings = settings.model_copy(update={"concurrency": 2})
    block, problems = task_block(settings), task_set(TASK_SETS[settings.set])
    served = profile.engine.served_model_name
    work = Path(tempfile.mkdtemp(prefix="task-score-"))
    name = f"taskscore-{secrets.token_hex(2)}"
    model = (ensure_smollm2 if args.profile == "sandbox-instruct" else ensure_gemma)(REPO_ROOT / ".sandbox" / "models")
    state = up([name], work / "state")
    host = state.host(name)
    try:
        inventory = work / "inventory.py"
        inventory.write_text(inventory_source(work / "state", [name], args.profile, {
            "model": {"local_path": str(model)}, "bench": {"quality": {"enabled": False}}}))
        run_pyinfra(inventory, "deploys/serve.py")
        client = [REPO_ROOT / "rigforge" / "__init__.py", *sorted((REPO_ROOT / "rigforge" / "bench").glob("*.py"))]
        for source in client:
            target = f"/tmp/client/{source.relative_to(REPO_ROOT)}"
            exec_in(host, f"mkdir -p $(dirname {target}) && cat > {target}", input_text=source.read_text())
        if args.capture:
            args.capture.mkdir(parents=True, exist_ok=True)
            first = block["questions"][0]["question"]
            capture(host, block["shots"] + question_block(first), served, profile.engine.port, args.capture)
        runner = ("import json, sys; sys.path.insert(0, '/tmp/client'); from rigforge.bench.config import "
                  "config_from_dict; from rigforge.bench.task_score import run_task_score; "
                  f"config = config_from_dict({{'base_url': 'http://127.0.0.1:{profile.engine.port}', "
                  f"'model': '{served}'}}); print(json.dumps(run_task_score(config, json.loads(sys.stdin.read()))))")

        def asked() -> dict:
            answered = json.loads(exec_in(host, ["python3", "-c", runner], input_text=json.dumps(block),
                                          timeout=900).stdout)
            return answered

        answered = asked()
        score = score_pass(answered, problems)
        print(json.dumps({key: value for key, value in score.items() if key != "marks"}, indent=1))
        for label in ["again, same engine start", "after an engine restart"][:max(0, args.passes - 1) * 2]:
            if label.startswith("after"):
                probe = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{profile.engine.port}/health')"
                exec_in(host, "systemctl restart rigforge-engine.service && for i in $(seq 1 120); do "
                              f"python3 -c \"{probe}\" 2>/dev/null && exit 0; sleep 1; done; exit 1")
            again = score_pass(asked(), problems)
            judged = compare_scores(score, again, settings.max_drop_points)
            print(f"A/A {label}: {again['correct']} of {again['total']} in {again['seconds']:.1f} s; {judged['line']}")
        for answer in answered["answers"][:3]:
            expected = problems[int(answer["id"][1:])].answer
            print(f"{answer['id']}: expected {expected}, answered {answer['text'][:160]!r}")
    finally:
        down([name], work / "state")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
