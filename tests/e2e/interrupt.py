"""Stop the controller in the middle of a step: run a deploy in the background, watch the host until the
step is under way (a file, a process; never a timer), then send the signal."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from rigforge.sandbox import SandboxHost, exec_in
from roles.service import WAIT_SCRIPT
from tests.e2e.pyinfra_run import REPO_ROOT, pyinfra_command


def interrupt_when(inventory: Path, deploy: str, log: Path, ready: Callable[[], bool], sig: signal.Signals,
                   timeout_s: float = 600, exit_timeout_s: float = 60,
                   after_signal: Callable[[], None] | None = None, args: tuple[str, ...] = (),
                   env: dict[str, str] | None = None) -> None:
    """Run ``deploy`` in the background and send ``sig`` to it once ``ready()`` says the step is under way;
    wait up to ``exit_timeout_s`` for it to end (after Ctrl-C pyinfra first finishes the command under way).
    ``after_signal`` runs right after the signal (e.g. closing a stalled connection, so that the command under
    way cannot finish); ``args`` follow the deploy on pyinfra's command line (``--data k=v``); ``env`` adds
    variables."""
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(REPO_ROOT)}
    with log.open("w") as out:  # a file: a full pipe would stall pyinfra
        run = subprocess.Popen(pyinfra_command(inventory, deploy, *args), cwd=REPO_ROOT, env=env, stdout=out,
                               stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout_s
        while not ready():
            assert run.poll() is None, f"the deploy ended before the step under test:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"the step under test never started:\n{log.read_text()[-3000:]}"
            time.sleep(0.3)
        run.send_signal(sig)
        if after_signal is not None:
            after_signal()
        # pyinfra answers Ctrl-C with "Exiting upon user request!" and status 0; only its ending is asserted.
        run.wait(timeout=exit_timeout_s)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def processes(host: SandboxHost, command: str) -> str:
    """The host's processes whose command line contains ``command`` (pgrep's own shell excluded)."""
    pattern = f"[{command[0]}]{command[1:]}"  # a regex that does not match its own text
    return exec_in(host, f"pgrep -af '{pattern}' || true").stdout.strip()


def health_wait_running(host: SandboxHost) -> bool:
    """The service role's health wait is running: the script itself (``sh WAIT_SCRIPT UNIT …``), not a fact
    command that reads its file while the deploy is still being planned, before any lock or restart."""
    return bool(processes(host, f"sh {WAIT_SCRIPT} "))
