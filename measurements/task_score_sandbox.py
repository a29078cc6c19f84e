"""The task score of the sandbox's Gemma 3 270M on a real sandbox host, and the llama.cpp answers it reads.

Starts one sandbox host (Debian 12, systemd, SSH), serves the sandbox profile's model with deploys/serve.py, copies
the bench client (rigforge/bench/, as the bench role uploads it) onto the host and runs the task pass
(rigforge/bench/task_score.py) there against the engine on 127.0.0.1, then grades the answers here
(rigforge/quality/tasks.py) and prints the score with its 95 % Wilson interval and the seconds it cost.

The questions are not GSM8K (none ships with rigforge, see rigforge/quality/tasks.py): ``original_problems`` below
writes grade-school word problems of this script's own (two or three steps, whole numbers, a worked answer ending
``#### N`` in GSM8K's form), so the sandbox's ``task_score.reason`` rests on a measured number. ``--capture DIR``
also writes three raw ``/v1/completions`` answers (a few-shot question, and the same prompt with 1 and 8 tokens to
answer) for tests/fixtures/quality/. Run it through the e2e lock; a few minutes on a 2-core machine:

    flock /tmp/rigforge-e2e.lock .venv/bin/python measurements/task_score_sandbox.py [--questions 50] [--capture DIR]
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from random import Random

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rigforge.bench.task_score import STOP, question_block, shots_prefix  # noqa: E402
from rigforge.profile.loader import load_profile  # noqa: E402
from rigforge.quality.tasks import Problem, score_pass  # noqa: E402
from rigforge.sandbox import down, exec_in, up  # noqa: E402
from rigforge.sandbox.model import ensure_gemma  # noqa: E402
from tests.e2e.conftest import inventory_source  # noqa: E402
from tests.e2e.pyinfra_run import run_pyinfra  # noqa: E402

NAMES = ["Ana", "Ben", "Chloe", "Dev", "Elif", "Femi", "Greta", "Hugo", "Ines", "Jonas"]
Template = Callable[[Random, str], tuple[str, str, int]]


def pencils(rng: Random, name: str) -> tuple[str, str, int]:
    per_box, boxes = rng.randint(6, 24), rng.randint(2, 9)
    given = rng.randint(1, per_box * boxes - 1)
    total = per_box * boxes
    return (f"A box holds {per_box} pencils. {name} buys {boxes} boxes and gives {given} pencils to friends. How "
            f"many pencils does {name} have left?",
            f"{boxes} boxes hold {boxes} * {per_box} = {total} pencils.\nAfter giving away {given}, {name} has "
            f"{total} - {given} = {total - given} pencils.", total - given)


def bakery(rng: Random, name: str) -> tuple[str, str, int]:
    muffin, cookie, muffins, cookies = rng.randint(2, 6), rng.randint(1, 3), rng.randint(2, 12), rng.randint(3, 20)
    spent = muffin * muffins + cookie * cookies
    return (f"A bakery sells muffins for ${muffin} each and cookies for ${cookie} each. {name} buys {muffins} muffins "
            f"and {cookies} cookies. How many dollars does {name} spend?",
            f"The muffins cost {muffins} * {muffin} = ${muffin * muffins}.\nThe cookies cost {cookies} * {cookie} = "
            f"${cookie * cookies}.\nTogether that is {muffin * muffins} + {cookie * cookies} = ${spent}.", spent)


def reading(rng: Random, name: str) -> tuple[str, str, int]:
    first, days, second, more = rng.randint(5, 30), rng.randint(2, 7), rng.randint(10, 40), rng.randint(2, 6)
    pages = first * days + second * more
    return (f"{name} reads {first} pages a day for {days} days, then {second} pages a day for {more} days. How many "
            f"pages does {name} read in all?",
            f"First {days} * {first} = {first * days} pages.\nThen {more} * {second} = {second * more} pages.\nIn all "
            f"{first * days} + {second * more} = {pages} pages.", pages)


def savings(rng: Random, name: str) -> tuple[str, str, int]:
    weekly, weeks = rng.randint(5, 25), rng.randint(4, 12)
    spent = rng.randint(10, weekly * weeks - 1)
    return (f"{name} saves ${weekly} every week. After {weeks} weeks, {name} spends ${spent} on a bike. How many "
            f"dollars are left?",
            f"{name} saved {weeks} * {weekly} = ${weekly * weeks}.\nAfter the bike, {weekly * weeks} - {spent} = "
            f"${weekly * weeks - spent} are left.", weekly * weeks - spent)


def garden(rng: Random, name: str) -> tuple[str, str, int]:
    rows, per_row, each = rng.randint(3, 12), rng.randint(4, 15), rng.randint(2, 9)
    plants = rows * per_row
    return (f"{name}'s garden has {rows} rows of {per_row} tomato plants. Each plant gives {each} tomatoes. How many "
            f"tomatoes does the garden give?",
            f"There are {rows} * {per_row} = {plants} plants.\nThey give {plants} * {each} = {plants * each} "
            f"tomatoes.", plants * each)


def bus(rng: Random, name: str) -> tuple[str, str, int]:
    start = rng.randint(20, 60)
    off, on = rng.randint(2, start - 5), rng.randint(2, 20)
    if (start - off + on) % 2:
        on += 1
    after = start - off + on
    return (f"{name}'s bus starts with {start} passengers. At the first stop {off} get off and {on} get on. At the "
            f"second stop half of the passengers get off. How many passengers are still on the bus?",
            f"After the first stop there are {start} - {off} + {on} = {after} passengers.\nHalf get off, so "
            f"{after} / 2 = {after // 2} are still on.", after // 2)


def pizza(rng: Random, name: str) -> tuple[str, str, int]:
    friends, slices = rng.randint(2, 8), rng.choice([6, 8, 10, 12])
    pizzas = friends * rng.randint(1, 4)
    each = pizzas * slices // friends
    return (f"{name} and friends, {friends} people in all, share {pizzas} pizzas cut into {slices} slices each. "
            f"Everyone gets the same number of slices. How many slices does each person get?",
            f"There are {pizzas} * {slices} = {pizzas * slices} slices.\nEach of the {friends} people gets "
            f"{pizzas * slices} / {friends} = {each} slices.", each)


def discount(rng: Random, name: str) -> tuple[str, str, int]:
    percent = rng.choice([10, 20, 25, 30, 40, 50])
    price = rng.randint(2, 30) * (100 // percent if 100 % percent == 0 else 10)
    off = price * percent // 100
    return (f"A jacket costs ${price}. {name} buys it on sale at {percent}% off. How many dollars does {name} pay?",
            f"The discount is {percent}% of {price} = ${off}.\n{name} pays {price} - {off} = ${price - off}.",
            price - off)


def walking(rng: Random, name: str) -> tuple[str, str, int]:
    minutes, days, weeks = rng.choice([15, 20, 30, 45]), rng.randint(3, 6), rng.randint(2, 8)
    total = minutes * 2 * days * weeks
    if total % 60:
        weeks = 6
        total = minutes * 2 * days * weeks
    return (f"{name} walks {minutes} minutes to school and {minutes} minutes back, {days} days a week. How many "
            f"hours does {name} walk in {weeks} weeks?",
            f"Each day is {minutes} * 2 = {minutes * 2} minutes.\nEach week is {minutes * 2} * {days} = "
            f"{minutes * 2 * days} minutes.\nIn {weeks} weeks that is {minutes * 2 * days} * {weeks} = {total} "
            f"minutes, or {total} / 60 = {total // 60} hours.", total // 60)


def eggs(rng: Random, name: str) -> tuple[str, str, int]:
    laid, used, price = rng.randint(8, 20), rng.randint(1, 5), rng.randint(1, 3)
    sold = laid - used
    return (f"{name}'s hens lay {laid} eggs a day. {name} eats {used} each day and sells the rest for ${price} "
            f"each. How many dollars does {name} make in a week?",
            f"Each day {laid} - {used} = {sold} eggs are sold, for {sold} * {price} = ${sold * price}.\nIn a week "
            f"that is {sold * price} * 7 = ${sold * price * 7}.", sold * price * 7)


TEMPLATES: list[Template] = [pencils, bakery, reading, savings, garden, bus, pizza, discount, walking, eggs]


def original_problems(count: int, seed: int) -> list[Problem]:
    """``count`` problems, every template in turn, numbers and names from ``seed`` (GSM8K's ``#### N`` form)."""
    rng = Random(seed)
    problems = []
    for index in range(count):
        question, worked, answer = TEMPLATES[index % len(TEMPLATES)](rng, rng.choice(NAMES))
        problems.append(Problem(question, str(answer), f"{worked}\n#### {answer}"))
    return problems


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
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument("--capture", type=Path, help="also write raw llama.cpp answers here")
    args = parser.parse_args(argv)
    profile = load_profile("sandbox")
    settings = profile.bench.quality.task_score
    problems = original_problems(settings.shots + args.questions, seed=43)
    work = Path(tempfile.mkdtemp(prefix="task-score-"))
    name = f"taskscore-{secrets.token_hex(2)}"
    model = ensure_gemma(REPO_ROOT / ".sandbox" / "models")
    state = up([name], work / "state")
    host = state.host(name)
    try:
        inventory = work / "inventory.py"
        inventory.write_text(inventory_source(work / "state", [name], "sandbox", {
            "model": {"local_path": str(model)}, "bench": {"quality": {"enabled": False}}}))
        run_pyinfra(inventory, "deploys/serve.py")
        client = [REPO_ROOT / "rigforge" / "__init__.py", *sorted((REPO_ROOT / "rigforge" / "bench").glob("*.py"))]
        for source in client:
            target = f"/tmp/client/{source.relative_to(REPO_ROOT)}"
            exec_in(host, f"mkdir -p $(dirname {target}) && cat > {target}", input_text=source.read_text())
        prefix = shots_prefix([(shot.question, shot.worked) for shot in problems[:settings.shots]])
        if args.capture:
            args.capture.mkdir(parents=True, exist_ok=True)
            first = problems[settings.shots]
            capture(host, prefix + question_block(first.question), "gemma-3-270m", profile.engine.port, args.capture)
        block = {"set": f"original-seed-43@{len(problems)}", "shots": prefix, "max_tokens": settings.max_tokens,
                 "concurrency": 2, "stop": list(STOP),
                 "questions": [{"id": f"q{index}", "question": problem.question}
                               for index, problem in enumerate(problems) if index >= settings.shots]}
        runner = ("import json, sys; sys.path.insert(0, '/tmp/client'); from rigforge.bench.config import "
                  "config_from_dict; from rigforge.bench.task_score import run_task_score; "
                  f"config = config_from_dict({{'base_url': 'http://127.0.0.1:{profile.engine.port}', "
                  "'model': 'gemma-3-270m'}); print(json.dumps(run_task_score(config, json.loads(sys.stdin.read()))))")
        answered = json.loads(exec_in(host, ["python3", "-c", runner], input_text=json.dumps(block),
                                      timeout=900).stdout)
        score = score_pass(answered, problems)
        print(json.dumps(score, indent=1))
        for answer in answered["answers"][:3]:
            expected = problems[int(answer["id"][1:])].answer
            print(f"{answer['id']}: expected {expected}, answered {answer['text'][:160]!r}")
    finally:
        down([name], work / "state")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
