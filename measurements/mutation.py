"""Do the unit tests fail when the code that guards keys, answers and verdicts is wrong? Mutation testing, by group.

Uses mutmut 3.8.1 (``pip install -e ".[mutation]"``; not a test dependency: slow, never part of the default suite).
It makes one-token changes ("mutants") to each function of a module, and runs, for each mutant, only the tests that
called that function while the group's tests ran once unchanged; a mutant the tests still pass is a survivor. Why
mutmut and not cosmic-ray: mutmut forks the already-warm pytest process for each mutant and runs only the tests
that reach the mutated function, where cosmic-ray starts a fresh test command per mutant, paying pytest's start and
pyinfra's and pydantic's imports each time (docs/design.md#tests has what that would cost here).

The modules and the unit tests that cover them: ``measurements/mutation_targets.yaml`` (groups). Each group runs
as its own mutmut project in ``.cache/mutation/GROUP/`` (a copy of the working tree, its ``setup.cfg`` written
here), with one worker. Survivors reviewed and found equivalent (no test can tell them apart from the original):
``measurements/mutation_equivalent.yaml``, matched by module, function and the changed lines (not by mutmut's
number, which shifts when a function changes), so a run lists only new survivors.

    .venv/bin/python measurements/mutation.py                      # every group
    .venv/bin/python measurements/mutation.py --group verdicts     # one group (repeatable)
    .venv/bin/python measurements/mutation.py --report-only        # re-read the last run's results

Prints, per module: mutants, killed, equivalent, not killed and the kill rate (killed / non-equivalent), then
each new survivor's diff with a stub for the equivalents file. Exit status 1 when any new survivor remains.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ROOT / "measurements" / "mutation_targets.yaml"
EQUIVALENT = ROOT / "measurements" / "mutation_equivalent.yaml"
WORK = ROOT / ".cache" / "mutation"
#: mutmut's statuses that mean a test failed because of the mutant (a timeout: the mutant made a test hang).
KILLED = {"killed", "timeout", "caught by type check"}


@dataclasses.dataclass(frozen=True)
class Group:
    """A set of modules mutated together and the unit tests that cover them."""

    name: str
    modules: tuple[str, ...]
    tests: tuple[str, ...]
    #: module → the only functions judged in it (a module not named here: every function)
    scope: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    def judges(self, mutant: Mutant) -> bool:
        functions = self.scope.get(mutant.module)
        return functions is None or mutant.function.removeprefix("x_") in functions


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One mutant's outcome: the module, the mutated function, its status and the lines it changed."""

    name: str
    module: str
    function: str
    status: str
    removed: tuple[str, ...] = ()
    added: tuple[str, ...] = ()

    def key(self) -> tuple[str, str, tuple[str, ...], tuple[str, ...]]:
        return self.module, self.function, self.removed, self.added


def load_groups(path: Path = TARGETS) -> list[Group]:
    """The groups of the targets file; a module is a path, or ``{path: [function, ...]}`` to judge only those."""
    groups = []
    for name, spec in yaml.safe_load(path.read_text())["groups"].items():
        paths = [next(iter(m)) if isinstance(m, dict) else m for m in spec["modules"]]
        scope = {module: tuple(functions) for m in spec["modules"] if isinstance(m, dict)
                 for module, functions in m.items()}
        groups.append(Group(name, tuple(paths), tuple(spec["tests"]), scope))
    return groups


def load_equivalents(path: Path = EQUIVALENT) -> dict[tuple[str, str, tuple[str, ...], tuple[str, ...]], str]:
    """(module, function, removed lines, added lines) → why no test can tell that mutant from the original."""
    entries = (yaml.safe_load(path.read_text()) or []) if path.exists() else []
    unexplained = [entry for entry in entries if str(entry.get("reason", "...")).strip() in ("", "...")]
    if unexplained:
        sys.exit(f"{path.relative_to(ROOT)}: an equivalent mutant needs its reason: {unexplained[0]}")
    return {(e["module"], e["function"], tuple(_squash(line) for line in e["removed"]),
             tuple(_squash(line) for line in e["added"])): e["reason"] for e in entries}


def _squash(line: str) -> str:
    return " ".join(line.split())


def prepare(group: Group) -> Path:
    """A fresh copy of the working tree (tracked and new files) with a setup.cfg naming the group's modules."""
    for path in (*group.modules, *group.tests):
        if not (ROOT / path).exists():
            sys.exit(f"{TARGETS.relative_to(ROOT)}: group {group.name}: {path} does not exist")
    work = WORK / group.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, work / name)
    top = sorted({name.split("/", 1)[0] for name in files if name and "/" in name} - {"rigforge", "tests"})
    (work / "setup.cfg").write_text("\n".join([
        "[mutmut]",
        "source_paths = rigforge",
        "only_mutate =", *(f"    {module}" for module in group.modules),
        "pytest_add_cli_args_test_selection =", *(f"    {test}" for test in group.tests),
        "pytest_add_cli_args =", "    -p", "    no:cacheprovider",
        "also_copy =", *(f"    {name}" for name in top),
        # a loaded shared machine: a test may take several times its recorded duration without hanging
        "timeout_constant = 10",
        "",
    ]))
    return work


def mutmut(work: Path, *words: str, log: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``mutmut WORDS`` in a group's folder; its output to ``log`` when given, else captured."""
    command = [str(Path(sys.executable).parent / "mutmut"), *words]
    if log is None:
        return subprocess.run(command, cwd=work, capture_output=True, text=True, check=False)
    with log.open("w") as out:
        return subprocess.run(command, cwd=work, stdout=out, stderr=subprocess.STDOUT, text=True, check=False)


def module_of(mutant: str, group: Group) -> tuple[str, str]:
    """(module path, function) of a mutant named like ``rigforge.serving.api_key.x_mask__mutmut_3``."""
    dotted, _, rest = mutant.partition(".x")
    if not rest:
        dotted, _, rest = mutant.rpartition(".")
        rest = rest.removeprefix("x")
    module = dotted.replace(".", "/") + ".py"
    if module not in group.modules:
        module = next((m for m in group.modules if m.endswith(module)), module)
    return module, "x" + rest.rsplit("__mutmut_", 1)[0]


#: Run inside a group's folder: the diff of each mutant named on stdin (one process, not one per mutant).
DIFFS = ("import json, sys\n"
         "from mutmut.mutation.diff_apply import get_diff_for_mutant\n"
         "print(json.dumps({name: get_diff_for_mutant(name) for name in json.load(sys.stdin)}))")


def changed_lines(work: Path, names: list[str]) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Each mutant's (removed lines, added lines), whitespace squashed."""
    if not names:
        return {}
    done = subprocess.run([sys.executable, "-c", DIFFS], cwd=work, input=json.dumps(names), capture_output=True,
                          text=True, check=True)
    changed = {}
    for name, diff in json.loads(done.stdout).items():
        lines = diff.splitlines()
        changed[name] = (tuple(_squash(line[1:]) for line in lines if line.startswith("-") and line[:3] != "---"),
                         tuple(_squash(line[1:]) for line in lines if line.startswith("+") and line[:3] != "+++"))
    return changed


def results(work: Path, group: Group) -> list[Mutant]:
    """The group's judged mutants with their status; the changed lines of those not killed."""
    listed = mutmut(work, "results", "--all", "true")
    found = []
    for line in listed.stdout.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and "__mutmut_" in name:
            module, function = module_of(name, group)
            found.append(Mutant(name, module, function, status))
    judged = [mutant for mutant in found if group.judges(mutant)]
    changed = changed_lines(work, [mutant.name for mutant in judged
                                   if mutant.status not in KILLED and mutant.status != "not checked"])
    return [dataclasses.replace(mutant, removed=changed[mutant.name][0], added=changed[mutant.name][1])
            if mutant.name in changed else mutant for mutant in judged]


def report(group: Group, mutants: list[Mutant], equivalents: dict, seconds: float | None) -> list[Mutant]:
    """Print the group's table; returns its new survivors."""
    timing = f", {seconds / 60:.1f} min" if seconds is not None else ""
    unrun = sum(m.status == "not checked" for m in mutants)
    warning = f"; {unrun} NOT RUN: the run failed, see its mutmut-run.log" if unrun else ""
    print(f"\n== {group.name} ({len(mutants)} mutants{timing}{warning})")
    print(f"  {'module':44} {'mutants':>7} {'killed':>7} {'equiv':>6} {'left':>5} {'rate':>7}")
    new = []
    for module in group.modules:
        own = [m for m in mutants if m.module == module]
        killed = sum(m.status in KILLED for m in own)
        equivalent = sum(m.status not in KILLED and m.key() in equivalents for m in own)
        left = [m for m in own if m.status not in KILLED and m.key() not in equivalents]
        judged = len(own) - equivalent
        rate = f"{100 * killed / judged:6.1f}%" if judged else "     -"
        print(f"  {module:44} {len(own):7} {killed:7} {equivalent:6} {len(left):5} {rate:>7}")
        new += left
    return new


def print_survivors(survivors: list[Mutant]) -> None:
    """Each new survivor's changed lines; stubs for the equivalents file go to .cache/mutation/survivors.yaml."""
    for mutant in survivors:
        print(f"\n-- {mutant.name} ({mutant.status})")
        print("\n".join([*(f"   - {line}" for line in mutant.removed), *(f"   + {line}" for line in mutant.added)]))
    stubs = [{"module": m.module, "function": m.function, "removed": list(m.removed), "added": list(m.added),
              "reason": "..."} for m in survivors]
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "survivors.yaml").write_text(yaml.safe_dump(stubs, sort_keys=False, width=200))
    if survivors:
        print(f"\nstubs for {EQUIVALENT.relative_to(ROOT)}: {(WORK / 'survivors.yaml').relative_to(ROOT)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--group", action="append", help="run only this group (repeatable); default: all")
    parser.add_argument("--report-only", action="store_true", help="re-read the last run's results, run nothing")
    args = parser.parse_args()
    groups = load_groups()
    unknown = set(args.group or ()) - {g.name for g in groups}
    if unknown:
        sys.exit(f"no such group in {TARGETS.relative_to(ROOT)}: {', '.join(sorted(unknown))}")
    chosen = [g for g in groups if not args.group or g.name in args.group]
    equivalents = load_equivalents()
    totals = {"mutants": 0, "killed": 0, "equivalent": 0}
    all_new: list[tuple[Path, Mutant]] = []  # (group's folder, survivor)
    started = time.monotonic()
    for group in chosen:
        seconds = None
        if args.report_only:
            work = WORK / group.name
        else:
            work = prepare(group)
            began = time.monotonic()
            run = mutmut(work, "run", "--max-children", "1", log=work / "mutmut-run.log")
            seconds = time.monotonic() - began
            if run.returncode != 0:
                print(f"mutmut run failed for {group.name} (exit {run.returncode}); its log: {work / 'mutmut-run.log'}")
        mutants = results(work, group)
        new = report(group, mutants, equivalents, seconds)
        all_new += [(work, m) for m in new]
        totals["mutants"] += len(mutants)
        totals["killed"] += sum(m.status in KILLED for m in mutants)
        totals["equivalent"] += sum(m.status not in KILLED and m.key() in equivalents for m in mutants)
    judged = totals["mutants"] - totals["equivalent"]
    rate = f"{100 * totals['killed'] / judged:.1f}%" if judged else "-"
    print(f"\nall: {totals['mutants']} mutants, {totals['killed']} killed, {totals['equivalent']} equivalent, "
          f"{len(all_new)} new survivors; killed / non-equivalent = {totals['killed']}/{judged} = {rate}")
    if not args.report_only:
        print(f"run time: {(time.monotonic() - started) / 60:.1f} min on {os.cpu_count()} cores, one mutmut worker")
    print_survivors([mutant for _, mutant in all_new])
    return 1 if all_new else 0


if __name__ == "__main__":
    sys.exit(main())
