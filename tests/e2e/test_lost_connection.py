"""Rigs that stop answering in the middle of a run, the ways a real one does, beside one that does not: each lost
rig is one line, the steady one finishes, the run exits non-zero (rigforge/connection/lost.py, connector.py).

Real here: three sandbox hosts written with ``rig_host`` as a rig owner writes them (the rigforge connector,
host-key checking on), a deploy whose one long step runs ``sleep`` on every rig, and two real losses while it
runs: one rig's network drops silently (every packet to its SSH port dropped on this machine's loopback with
iptables, so nothing answers and nothing closes: a cable, a switch, a laptop's Wi-Fi), another one's sshd is
killed (its connections end at once). The rigs stand in only because tests may reach nothing but loopback.

Slow (the silent drop is found after a minute of unacknowledged keepalives):
``pytest -m slow tests/e2e/test_lost_connection.py``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rigforge.connection.connector import KEEPALIVE_S, UNACKNOWLEDGED_LIMIT_S
from rigforge.connection.lost import lost_line
from rigforge.sandbox import SandboxHost, exec_in
from tests.e2e.conftest import Sandbox
from tests.e2e.interrupt import processes
from tests.e2e.power_cut import run_and_cut

pytestmark = pytest.mark.slow

STEP = "A long step"
SLEEP_S = 150  # longer than the silent drop takes to be found
DEPLOY = f"""from pyinfra.operations import server

from rigforge.operations.lock import release_deploy_lock, take_deploy_lock

take_deploy_lock()
server.shell(name={STEP!r}, commands=["sleep {SLEEP_S}"])
release_deploy_lock()
"""
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def rig_entry(host: SandboxHost, sandbox: Sandbox) -> str:
    state = sandbox.state
    return (f"    rig_host({host.name!r}, profile='sandbox', ssh_hostname='127.0.0.1', ssh_port={host.port},\n"
            f"             ssh_key={str(state.key_path)!r}, ssh_known_hosts_file={str(state.known_hosts_path)!r}),\n")


def loopback_drop(port: int, on: bool) -> list[str]:
    """The iptables command that drops (or stops dropping) every packet to ``port`` on this machine's loopback."""
    return ["iptables", "-I" if on else "-D", "INPUT", "-i", "lo", "-p", "tcp", "--dport", str(port), "-j", "DROP"]


@pytest.mark.skipif(shutil.which("iptables") is None, reason="no iptables on this machine")
def test_a_silent_network_drop_and_a_killed_sshd_are_one_line_each_and_the_other_rig_finishes(
        sandbox: Sandbox, tmp_path: Path) -> None:
    silent, nossh, steady = (sandbox.fresh_host(name) for name in ("silent", "nossh", "steady"))
    inventory = tmp_path / "inventory.py"
    inventory.write_text("from rigforge.inventory import rig_host\n\nrigs = [\n"
                         + "".join(rig_entry(host, sandbox) for host in (silent, nossh, steady)) + "]\n")
    deploy = tmp_path / "long_step.py"
    deploy.write_text(DEPLOY)

    def sleeping() -> bool:
        return all(processes(host, f"sleep {SLEEP_S}") for host in (silent, nossh, steady))

    def lose_two() -> None:
        subprocess.run(loopback_drop(silent.port, True), check=True)
        exec_in(nossh, "pkill -KILL sshd")

    try:
        run = run_and_cut(inventory, str(deploy), tmp_path / "run.log", sleeping, lose_two,
                          exit_timeout_s=SLEEP_S + 120)
    finally:
        subprocess.run(loopback_drop(silent.port, False), check=False)
    said = {host.name: [re.sub(r"^\[[^]]+\]\s+", "", ANSI.sub("", line).strip())
                        for line in run.stderr.splitlines() if f"[{host.name}]" in line and "connection lost" in line]
            for host in (silent, nossh, steady)}
    print("\n".join(f"[{name}] {line}" for name, lines in said.items() for line in lines))  # the docs'
    assert run.returncode != 0
    assert "Traceback" not in run.stderr and "bug report" not in run.stderr, run.stderr[-4000:]
    head = lost_line(STEP, 0).split(" after ")[0]
    for name in (silent.name, nossh.name):
        assert len(said[name]) == 1 and said[name][0].startswith(f"{head} after "), run.stderr[-4000:]
    seconds = {name: int(re.search(r" after (\d+) s", said[name][0]).group(1)) for name in (silent.name, nossh.name)}
    # sshd killed: its connection ends at once. Silent: found once keepalives go unacknowledged past the limit.
    assert seconds[nossh.name] < KEEPALIVE_S
    assert UNACKNOWLEDGED_LIMIT_S <= seconds[silent.name] < UNACKNOWLEDGED_LIMIT_S + 3 * KEEPALIVE_S, seconds
    assert said[steady.name] == []
    results = (run.data or {})["results"]
    assert sorted(results["failed_hosts"]) == sorted([silent.name, nossh.name])
    step = next(op for op in results["operations"] if op["name"] == STEP)
    assert step["success"] == [steady.name]
