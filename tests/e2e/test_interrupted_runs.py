"""Interrupted runs resume: the controller is stopped (Ctrl-C or SIGKILL) in the middle of a long step, and
the next run converges with nothing half-written, no leftover lock and no manual cleanup.

Real here: a Debian 12 host with systemd, SSH, deploys/serve.py with the sandbox profile (xllamacpp from
PyPI, Gemma 3 270M uploaded with the ``local`` source, the real systemd unit); each step is caught by
watching the host (the ``.part`` file, pip's process, the health wait), not by a timer. The tests share
one host and run in order:

1. Ctrl-C in the middle of the weights upload: the next run takes over the lock, resumes at the last whole
   chunk and ends with verified weights and a healthy service (SIGKILL mid-upload: test_serve_sandbox.py);
2. SIGKILL while pip fills the engine venv: pip dies with the connection (it ran on detached before), and
   the next run rebuilds the venv whole;
3. Ctrl-C while the engine unit restarts with a new flag: the next run finds the service running with
   its current inputs and changes nothing more.

Each ends with a dry run that plans no change and no lock on the host. The fourth point, Ctrl-C and SIGKILL
in the middle of the engine image build, is in test_images_build.py, whose host has its own Docker engine.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rigforge.operations.lock import LOCK_PATH
from rigforge.operations.venv import venv_marker
from rigforge.operations.weights import UPLOAD_CHUNK_BYTES
from rigforge.profile.loader import load_profile
from rigforge.sandbox import SandboxHost, exec_in
from rigforge.sandbox.model import ensure_gemma
from rigforge.serving.engines import LLAMA_VENV
from tests.e2e.conftest import Sandbox
from tests.e2e.interrupt import health_wait_running, interrupt_when, processes
from tests.e2e.pyinfra_run import REPO_ROOT, assert_no_changes, run_pyinfra
from tests.e2e.serve_helpers import (
    SshProxy,
    ask_capital_of_france,
    known_hosts_for_port,
    proxied_inventory,
    service_show,
)

DEPLOY = "deploys/serve.py"
PROFILE = load_profile("sandbox")
MODEL_FILE = f"{PROFILE.model.path}/{PROFILE.model.files[0].name}"
BASE_URL = f"http://127.0.0.1:{PROFILE.engine.port}"
TAKEOVER = "taking over the deploy lock held by"


@dataclass
class Rig:
    sandbox: Sandbox
    host: SandboxHost
    overrides: dict
    inventory: Path
    tmp: Path


@pytest.fixture(scope="module")
def rig(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    tmp = tmp_path_factory.mktemp("resume")
    model = ensure_gemma(REPO_ROOT / ".cache" / "models")
    host = sandbox.fresh_host("resume")
    overrides = {"model": {"local_path": str(model)}}
    yield Rig(sandbox, host, overrides, sandbox.write_inventory(tmp / "inventory.py", [host], "sandbox", overrides),
              tmp)


def converged(rig: Rig, inventory: Path) -> None:
    """No lock left, the service healthy and answering, and a dry run that plans nothing."""
    assert exec_in(rig.host, f"test -e {LOCK_PATH}").returncode != 0
    assert service_show(rig.host, "ActiveState", "UnitFileState") == {"ActiveState": "active",
                                                                      "UnitFileState": "enabled"}
    assert ask_capital_of_france(rig.host, BASE_URL, PROFILE.engine.served_model_name)["text"].startswith(" Paris")
    assert_no_changes(inventory, DEPLOY)


def test_ctrl_c_in_the_weights_upload(rig: Rig) -> None:
    host = rig.host
    part = f"{MODEL_FILE}.part"
    # After Ctrl-C pyinfra finishes the command under way: on a fast machine that was the rest of the upload.
    # The first run goes through a relay that stops passing pyinfra's bytes after two and a bit chunks, so the
    # upload is stalled midway when Ctrl-C comes, and the relay closes right after it.
    proxy = SshProxy(host.port, pause_after=int(2.4 * UPLOAD_CHUNK_BYTES))
    known = known_hosts_for_port(rig.sandbox.state.known_hosts_path, host.port, proxy.port, rig.tmp / "known_hosts")
    through_proxy = proxied_inventory(rig.tmp / "proxied.py", rig.sandbox.state_dir, host, proxy, known,
                                      rig.overrides)

    def upload_stalled() -> bool:
        size = exec_in(host, f"stat -c %s {part} 2>/dev/null").stdout.strip()
        return proxy.paused.is_set() and size == str(2 * UPLOAD_CHUNK_BYTES)

    try:
        interrupt_when(through_proxy, DEPLOY, rig.tmp / "weights.log", upload_stalled, signal.SIGINT,
                       after_signal=proxy.close)
    finally:
        proxy.close()
    assert exec_in(host, f"test -e {MODEL_FILE}").returncode != 0  # never a final name on unverified bytes
    stored = int(exec_in(host, f"stat -c %s {part}").stdout)

    again = run_pyinfra(rig.inventory, DEPLOY)
    output = again.stdout + again.stderr
    assert TAKEOVER in output and "is gone" in output
    resumed = re.search(r"resuming the upload at ([0-9.]+) of", output)
    assert resumed and float(resumed.group(1)) >= UPLOAD_CHUNK_BYTES / 1e6 and stored % UPLOAD_CHUNK_BYTES == 0
    assert exec_in(host, f"sha256sum {MODEL_FILE}").stdout.split()[0] == PROFILE.model.files[0].sha256
    leftovers = [name for name in exec_in(host, f"ls -A {PROFILE.model.path}").stdout.split()
                 if name.endswith((".part", ".chunk"))]
    assert leftovers == []
    converged(rig, rig.inventory)


def test_sigkill_in_the_engine_venv_install(rig: Rig) -> None:
    host = rig.host
    package = PROFILE.engine.native.package  # type: ignore[union-attr]
    # No marker: what an install cut short leaves, so this run rebuilds the venv (and pip downloads again).
    exec_in(host, f"rm -f {venv_marker(LLAMA_VENV)}")
    interrupt_when(rig.inventory, DEPLOY, rig.tmp / "venv.log",
                   lambda: bool(processes(host, f"{LLAMA_VENV}/bin/pip install")), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while leftover := processes(host, f"{LLAMA_VENV}/bin/pip"):
        assert time.monotonic() < deadline, f"pip went on without its controller: {leftover}"
        time.sleep(0.5)
    assert exec_in(host, f"test -e {venv_marker(LLAMA_VENV)}").returncode != 0

    again = run_pyinfra(rig.inventory, DEPLOY)
    assert TAKEOVER in again.stdout + again.stderr
    assert exec_in(host, f"cat {venv_marker(LLAMA_VENV)}").stdout.strip() == package
    imported = exec_in(host, f"{LLAMA_VENV}/bin/python -c 'import xllamacpp'")
    assert imported.returncode == 0, imported.stderr
    converged(rig, rig.inventory)


FREEZER = "rigforge-test-freeze-engine"
FROZEN = "/run/rigforge-test-engine-frozen"


def freeze_new_invocation(before: str) -> str:
    """A host-side loop that stops (SIGSTOP) the engine as soon as systemd has started a new invocation of it
    (not ``before``) with a main process, then marks that it did."""
    show = "systemctl show -p {} --value rigforge-engine.service"
    return (f'while [ "$({show.format("InvocationID")})" = {before} ] || [ "$({show.format("MainPID")})" = 0 ];'
            f" do sleep 0.05; done; systemctl kill --signal=SIGSTOP rigforge-engine.service && touch {FROZEN}")


def test_ctrl_c_in_the_unit_restart(rig: Rig) -> None:
    host = rig.host
    before = service_show(host, "InvocationID")["InvocationID"]
    changed = rig.sandbox.write_inventory(rig.tmp / "batch.py", [host], "sandbox",
                                          {**rig.overrides, "engine": {"flags": {"--batch-size": 256}}})

    log = rig.tmp / "restart.log"
    # The restarted engine is frozen from its first moment until pyinfra has taken the Ctrl-C, by a watcher on
    # the host itself (a 50 ms loop, no docker exec in between): frozen any later, a fast engine could answer
    # the health wait first, and the deploy could finish and let go of its lock before the signal came. The
    # signal waits for that freeze too: the wait script's name alone was once matched by a fact command reading
    # its file while the deploy was still being planned, and the Ctrl-C came before any lock was taken.
    exec_in(host, f"systemd-run --quiet --collect --unit={FREEZER} sh -c '{freeze_new_invocation(before)}'")

    def health_wait_held() -> bool:
        return exec_in(host, f"test -e {FROZEN}").returncode == 0 and health_wait_running(host)

    def thaw_once_pyinfra_exits() -> None:
        deadline = time.monotonic() + 60
        try:
            while "Exiting upon user request!" not in log.read_text():
                assert time.monotonic() < deadline, f"pyinfra never took the Ctrl-C:\n{log.read_text()[-3000:]}"
                time.sleep(0.2)
        finally:  # never leave the engine frozen for the tests after this one
            exec_in(host, "systemctl kill --signal=SIGCONT rigforge-engine.service")

    try:
        interrupt_when(changed, DEPLOY, log, health_wait_held, signal.SIGINT, after_signal=thaw_once_pyinfra_exits)
    finally:  # also when the deploy ended before the signal: no watcher and no frozen engine left behind
        exec_in(host, f"systemctl stop {FREEZER} 2>/dev/null; rm -f {FROZEN}; "
                      "systemctl kill --signal=SIGCONT rigforge-engine.service")

    again = run_pyinfra(changed, DEPLOY)
    assert TAKEOVER in again.stdout + again.stderr
    pid = service_show(host, "MainPID")["MainPID"]
    assert "--batch-size\x00256" in exec_in(host, f"cat /proc/{pid}/cmdline").stdout
    assert service_show(host, "InvocationID")["InvocationID"] != before
    converged(rig, changed)
