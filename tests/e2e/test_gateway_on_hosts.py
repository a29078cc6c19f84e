"""The fleet's one endpoint, for real: three sandbox rigs serving Gemma 3 270M behind HAProxy on one of them.

Real here: three Debian 12 systemd hosts, each serving llama.cpp (xllamacpp) under systemd on 0.0.0.0 with its own
API key (so the gateway adds each rig's key on the way), Debian's HAProxy under systemd from deploys/gateway.py.
A bounded load (4 clients, every other request streamed) runs from this machine through the gateway while one
rig's engine is killed (systemd starts it again), another's is hung (SIGSTOP, then SIGCONT), then deploys/serve.py
moves that rig to another recipe: drained at the gateway before its restart, returned once healthy; the counts and
who serves what at each step are printed. Non-streamed requests never fail, and no stream fails before its
response headers (HAProxy's retry-on moves those to another rig). A stream cut after its headers cannot be retried
by HAProxy (it forwards a 200's headers as they come): those cut before their first token and those cut after it are
counted and printed apart. llama.cpp's server sends its headers only once the first token's chunk exists, so the
first kind needs an engine to die between two writes of one thread.

The module's one test costs the three rigs' serve deploys (weights, engine venvs: a few minutes on 2 cores), so it
is marked slow: ``pytest -m slow tests/e2e/test_gateway_on_hosts.py -s``. The suite's own fleet under load is the
driver rollout's (tests/e2e/test_driver_rollout.py: a rig killed, one hung, the driver update rolled over the
fleet), on the three rigs it shares with the rollout tests.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyinfra_run import REPO_ROOT, assert_no_changes, changed_ops, run_pyinfra

from rigforge.gateway.haproxy import UNIT
from rigforge.sandbox import exec_in
from rigforge.sandbox.model import ensure_gemma
from rigforge.serving.engines import UNIT_NAME
from tests.bench_support.gateway_load import counts, load, one_request
from tests.e2e.conftest import E2E_OVERRIDES
from tests.e2e.fleet_gateway import MODEL, gateway_url, user_key, wait_for, who_serves, write_fleet_inventory

if TYPE_CHECKING:
    from conftest import Sandbox

pytestmark = pytest.mark.slow

def test_the_fleet_keeps_answering_while_one_rig_dies_one_hangs_and_one_is_restarted(sandbox: Sandbox,
                                                                                   tmp_path: Path) -> None:
    ensure_gemma(REPO_ROOT / ".sandbox" / "models")
    rigs = [sandbox.fresh_host(f"fleet{index}") for index in range(3)]
    inventory = write_fleet_inventory(tmp_path / "fleet.py", sandbox, rigs, tmp_path, E2E_OVERRIDES)
    run_pyinfra(inventory, "deploys/serve.py", timeout=1500)
    dry = run_pyinfra(inventory, "deploys/gateway.py", "--diff", dry=True)
    assert any("haproxy.cfg" in name for name in changed_ops(dry)), changed_ops(dry)  # planned, nothing applied
    assert "key-of-" not in dry.stdout + dry.stderr
    applied = run_pyinfra(inventory, "deploys/gateway.py")
    assert "key-of-" not in applied.stdout + applied.stderr  # no rig's key printed
    assert_no_changes(inventory, "deploys/gateway.py")
    gateway = rigs[0]
    for rig in rigs:
        wait_for(gateway, rig.name, "UP")
    modes = exec_in(gateway, "stat -c '%a %U' /etc/rigforge/secrets/gateway/rigs/*.map "
                             "/etc/rigforge/secrets/gateway/users/*").stdout.split("\n")
    assert all(line.startswith("600 root") for line in modes if line), modes
    alice, url = user_key(gateway, "alice"), gateway_url(gateway)
    assert one_request(url, None, stream=False, model=MODEL).status == 401  # no key, no answer
    assert one_request(url, "wrong", stream=False, model=MODEL).status == 401
    assert one_request(url, alice, stream=False, model="no-such-model").status == 404

    outcomes: list = []
    began, stop = time.monotonic(), threading.Event()
    worker = threading.Thread(target=lambda: outcomes.extend(
        load(url, alice, clients=4, until=began + 600, streams=True, model=MODEL, stop=stop)))
    worker.start()
    try:
        time.sleep(3)
        exec_in(rigs[1], f"systemctl kill --signal=SIGKILL {UNIT_NAME}")  # dies; systemd starts it again
        wait_for(gateway, rigs[1].name, "DOWN")
        exec_in(rigs[2], f"systemctl kill --signal=SIGSTOP {UNIT_NAME}")  # hung: accepts, never answers
        wait_for(gateway, rigs[2].name, "DOWN")
        time.sleep(3)
        exec_in(rigs[2], f"systemctl kill --signal=SIGCONT {UNIT_NAME}")
        wait_for(gateway, rigs[1].name, "UP", timeout_s=120)
        wait_for(gateway, rigs[2].name, "UP")
        # A restart by deploys/serve.py (another recipe): drained at the gateway first, returned once healthy.
        moved = run_pyinfra(inventory, "deploys/serve.py", "--limit", rigs[2].name, "--data", "recipe=one-thread",
                            timeout=900)
        wait_for(gateway, rigs[2].name, "UP")
    finally:
        stop.set()
    worker.join()
    said = [line.strip() for line in (moved.stdout + moved.stderr).splitlines() if "who serves what" in line]
    print("\n".join(said))
    assert any("out of rotation; who serves what" in line for line in said), said
    assert any("back once its health wait passed (in rotation once its health checks pass)" in line
               for line in said), said
    table = who_serves(gateway)
    tally = counts(outcomes)
    print(f"\nthrough the gateway in {time.monotonic() - began:.0f} s: {tally}; refused with: "
          f"{sorted(o.status for o in outcomes if o.status)}")
    print("who serves what at the end: " + ", ".join(f"{row['rig']} {row['status']}" for row in table))
    assert tally["plain"] > 0 and tally["stream"] > 0
    assert tally["plain failed"] == 0
    assert tally["stream failed before headers"] == 0  # not started: the gateway must have retried it
    # Cut after the headers (before or after the first token): no gateway can retry these; counted, printed above.
    assert all(row["status"] == "UP" for row in table), table
    assert exec_in(gateway, f"systemctl is-active {UNIT}").stdout.strip() == "active"
