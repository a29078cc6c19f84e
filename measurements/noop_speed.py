"""What a re-run costs on a converged rig: no-op wall time and remote commands, 1 host beside N (no asserting).

Starts N sandbox hosts (its own state directory, its own host names), converges them, then times no-op runs
interleaved so that the machine's load falls on every variant alike (median and spread of ``--repeats``):

- ``full 1``: ``deploys/full.py --data bench=false`` on one host (the converged re-run a user makes most);
- ``host 1`` and ``host N``: ``deploys/host.py`` on one host and on all N (does a fleet cost one host?).

Each variant first runs once untimed: the converging run recorded the reads a converge makes, and the
first no-op records what a no-op reads (``rigforge/reads/read_ahead.py``). Then one ``--debug`` run per
variant counts every remote command each host got (pyinfra's "Running command on HOST" lines: fact reads,
the read-ahead, the deploy lock and operations alike) and the controller's peak memory (the child's own
``ru_maxrss``), and it prints the ratios side by side.

Every timed run also reports CPU seconds on both sides: the controller's (pyinfra's own rusage) and the sandbox
hosts' (their containers' cgroup CPU counters: sshd, the shells, the commands). On a real fleet each rig spends
its own CPU; here every sandbox host's sshd shares this machine's cores with the controller, so the fleet's
wall time includes work that a rack of rigs does in parallel. Last, it measures what one SSH session costs
before rigforge sends anything through it (``ssh_session_cost.py``) beside what each further host may cost
at best for the fleet to stay within 1.5x of one host: the floor no fact read or operation can go under.

    .venv/bin/python measurements/noop_speed.py [--hosts 16] [--repeats 5] [--keep]
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from measurements.ssh_session_cost import ssh_session_cpu  # noqa: E402
from rigforge.sandbox import down, up  # noqa: E402
from rigforge.sandbox.model import ensure_gemma  # noqa: E402
from tests.e2e.conftest import inventory_source  # noqa: E402

COMMAND_LINE = re.compile(r"Running command on (?P<host>\S+): \(pty=")


@dataclass
class Variant:
    """One timed no-op: a deploy on an inventory, with the switches it runs with."""

    label: str
    inventory: Path
    deploy: str
    hosts: list[str]
    args: tuple[str, ...] = ()


@dataclass
class Run:
    """What one pyinfra run took: wall seconds, exit status, the controller's peak memory, its output."""

    seconds: float
    returncode: int
    max_rss_mib: float
    output: str
    controller_cpu: float = 0.0
    hosts_cpu: float | None = None


def container_cpu_files(names: list[str]) -> list[Path]:
    """The cgroup CPU counter of each sandbox host's container (cgroup v1 or v2); empty when unreadable."""
    ids = subprocess.run(["docker", "inspect", "-f", "{{.Id}}", *(f"rigforge-{name}" for name in names)],
                         capture_output=True, text=True, check=False).stdout.split()
    files = []
    for container_id in ids:
        for candidate in (Path(f"/sys/fs/cgroup/cpuacct/docker/{container_id}/cpuacct.usage"),
                          Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cpu.stat")):
            if candidate.exists():
                files.append(candidate)
                break
    return files if len(files) == len(names) else []


def cpu_seconds(files: list[Path]) -> float:
    """CPU seconds the containers have used so far (v1: nanoseconds; v2: ``usage_usec`` in cpu.stat)."""
    total = 0.0
    for path in files:
        text = path.read_text()
        if path.name == "cpuacct.usage":
            total += int(text) / 1e9
        else:
            total += int(re.search(r"^usage_usec (\d+)", text, re.M)[1]) / 1e6
    return total


def pyinfra(inventory: Path, deploy: str, *args: str, verbose: bool = False,
            host_cpu_files: list[Path] | None = None) -> Run:
    """Run ``pyinfra -y`` once from the repository root; the child's own rusage gives its peak memory and
    CPU, the hosts' cgroup counters theirs."""
    cmd = [sys.executable, "-m", "pyinfra", "-y", *(["--debug"] if verbose else []), str(inventory), deploy, *args]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with tempfile.TemporaryFile("w+") as output:
        hosts_before = cpu_seconds(host_cpu_files) if host_cpu_files else None
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=output, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        hosts_cpu = cpu_seconds(host_cpu_files) - hosts_before if hosts_before is not None else None
        proc.returncode = os.waitstatus_to_exitcode(status)
        output.seek(0)
        return Run(seconds, proc.returncode, usage.ru_maxrss / 1024, output.read(),
                   usage.ru_utime + usage.ru_stime, hosts_cpu)


def checked(run: Run, what: str) -> Run:
    """Stop the measurement when a run failed: a failed run is no number."""
    if run.returncode != 0:
        raise SystemExit(f"{what} failed (exit {run.returncode}):\n{run.output[-4000:]}")
    return run


def commands_per_host(output: str) -> dict[str, int]:
    """Remote commands per host from a ``--debug`` run's output."""
    counts: dict[str, int] = {}
    for match in COMMAND_LINE.finditer(output):
        counts[match["host"]] = counts.get(match["host"], 0) + 1
    return counts


def spread(values: list[float]) -> str:
    """``median (min-max)`` in seconds."""
    return f"{statistics.median(values):6.2f} s ({min(values):.2f}-{max(values):.2f})"


def start_hosts(count: int, state_dir: Path) -> list[str]:
    """Start ``count`` sandbox hosts named for this script, so that no other sandbox host is touched."""
    names = [f"noop{i}-{os.getpid() % 10000}" for i in range(1, count + 1)]
    print(f"starting {count} sandbox hosts in {state_dir}", flush=True)
    up(names, state_dir)
    return names


def write_inventory(path: Path, state_dir: Path, names: list[str], model: Path) -> Path:
    """An inventory of sandbox hosts with the sandbox profile, the model uploaded from this machine."""
    path.write_text(inventory_source(state_dir, names, "sandbox", {"model": {"local_path": str(model)}}))
    return path


def print_session_floor(state_dir: Path, name: str, commands: int, cpu_files: list[Path], one_host_s: float,
                        hosts: int) -> None:
    """What the SSH session alone costs per host, beside what a fleet within 1.5x of one host may spend per host
    at best (half of one host's wall time, every core busy, spread over the other hosts)."""
    if not cpu_files:
        return
    controller_s, host_s = ssh_session_cpu(state_dir, name, commands, lambda: cpu_seconds(cpu_files))
    cores = os.cpu_count() or 1
    budget_s = 0.5 * one_host_s * cores / (hosts - 1)
    print(f"one SSH session alone (connect, {commands} commands, close): {(controller_s + host_s) * 1000:.0f} ms "
          f"of CPU (controller {controller_s * 1000:.0f}, host {host_s * 1000:.0f}); within 1.5x of one host, each "
          f"of the other {hosts - 1} hosts may cost at most {budget_s * 1000:.0f} ms of CPU on these {cores} cores")


def main() -> int:
    """Start, converge, time, count, print; remove the hosts unless --keep."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=16, help="hosts in the fleet variant")
    parser.add_argument("--repeats", type=int, default=5, help="timed no-op runs per variant")
    parser.add_argument("--keep", action="store_true", help="leave the hosts running afterwards")
    args = parser.parse_args()
    state_dir = REPO_ROOT / ".sandbox-noop-bench"
    # pyinfra turns off writing bytecode, so a module changed since its last import would be compiled again
    # on every timed run; compile once first, as pip does when it installs a package.
    for package in ("rigforge", "roles"):
        compileall.compile_dir(REPO_ROOT / package, quiet=1)
    model = ensure_gemma(REPO_ROOT / ".cache" / "models")
    names = start_hosts(args.hosts, state_dir)
    try:
        one = write_inventory(state_dir / "one.py", state_dir, names[:1], model)
        fleet = write_inventory(state_dir / "fleet.py", state_dir, names, model)
        started = time.perf_counter()
        checked(pyinfra(one, "deploys/full.py", "--data", "bench=false"), "converging the first host (full.py)")
        checked(pyinfra(fleet, "deploys/host.py"), f"converging {args.hosts} hosts (host.py)")
        print(f"converged in {time.perf_counter() - started:.0f} s", flush=True)
        variants = [
            Variant("full 1", one, "deploys/full.py", names[:1], ("--data", "bench=false")),
            Variant("host 1", one, "deploys/host.py", names[:1]),
            Variant(f"host {args.hosts}", fleet, "deploys/host.py", names),
        ]
        cpu_files = {variant.label: container_cpu_files(variant.hosts) for variant in variants}
        for variant in variants:
            first = pyinfra(variant.inventory, variant.deploy, *variant.args)
            checked(first, f"{variant.label} (untimed first no-op)")
        seconds: dict[str, list[float]] = {variant.label: [] for variant in variants}
        controller_cpu: dict[str, list[float]] = {variant.label: [] for variant in variants}
        hosts_cpu: dict[str, list[float]] = {variant.label: [] for variant in variants}
        for repeat in range(1, args.repeats + 1):
            for variant in variants:
                run = checked(pyinfra(variant.inventory, variant.deploy, *variant.args,
                                      host_cpu_files=cpu_files[variant.label]), variant.label)
                seconds[variant.label].append(run.seconds)
                controller_cpu[variant.label].append(run.controller_cpu)
                if run.hosts_cpu is not None:
                    hosts_cpu[variant.label].append(run.hosts_cpu)
            print(f"repeat {repeat}/{args.repeats}: "
                  + ", ".join(f"{label} {values[-1]:.2f} s" for label, values in seconds.items()), flush=True)
        print()
        print(f"no-op runs on converged sandbox hosts, {args.repeats} interleaved repeats, {os.cpu_count()} cores")
        print(f"{'variant':<10} {'wall median (min-max)':<26} {'commands/host':>14} {'peak RSS':>10} "
              f"{'controller CPU':>15} {'hosts CPU':>10}")
        most_commands = 0
        for variant in variants:
            counted = checked(pyinfra(variant.inventory, variant.deploy, *variant.args, verbose=True),
                              f"{variant.label} --debug")
            per_host = commands_per_host(counted.output)
            most_commands = max([most_commands, *per_host.values()])
            commands = "/".join(str(n) for n in sorted(set(per_host.values()))) or "0"
            host_side = (f"{statistics.median(hosts_cpu[variant.label]):8.2f} s" if hosts_cpu[variant.label]
                         else f"{'n/a':>10}")
            print(f"{variant.label:<10} {spread(seconds[variant.label]):<26} {commands:>14} "
                  f"{counted.max_rss_mib:7.0f} MiB {statistics.median(controller_cpu[variant.label]):13.2f} s "
                  f"{host_side}")
        fleet_label = variants[2].label

        def ratio(measured: dict[str, list[float]]) -> str:
            if not measured[fleet_label] or not measured["host 1"]:
                return "n/a"
            return f"{statistics.median(measured[fleet_label]) / statistics.median(measured['host 1']):.2f}x"

        print(f"\n{fleet_label} / host 1, medians: wall {ratio(seconds)}, controller CPU {ratio(controller_cpu)}, "
              f"hosts' CPU {ratio(hosts_cpu)} (for {args.hosts} hosts)")
        print_session_floor(state_dir, names[0], most_commands, cpu_files["host 1"],
                            statistics.median(seconds["host 1"]), args.hosts)
    finally:
        if not args.keep:
            down(names, state_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
