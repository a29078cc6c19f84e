"""What one SSH session costs in CPU before rigforge does anything in it: the floor under a fleet's no-op.

pyinfra keeps one SSH connection per host and sends each remote command as its own exec channel. This opens
sessions to a sandbox host the same way (paramiko, the sandbox's key, host key checked), sends ``true`` as
many times as a no-op run sends commands, closes, and reads the CPU both sides spent: this process's own
(paramiko's handshake and channels) and the host container's cgroup counter (sshd, PAM, the shells).

    controller_s, host_s = ssh_session_cpu(state_dir, "noop1-1234", commands=3, host_cpu=read_counter)
"""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from rigforge.sandbox.ssh import ssh_client
from rigforge.sandbox.state import load_state

TEARDOWN_S = 0.3  # sshd finishes the session (PAM close, logs) after the client has gone


def own_cpu_seconds() -> float:
    """CPU seconds this process has used so far, every thread (paramiko's transport runs in one)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def ssh_session_cpu(state_dir: Path, name: str, commands: int, host_cpu: Callable[[], float],
                    sessions: int = 7) -> tuple[float, float]:
    """Median CPU seconds of one session (connect, ``commands`` times ``true``, close) to sandbox host ``name``:
    ``(controller, host)``, the host's read from ``host_cpu`` (its container's counter)."""
    state = load_state(state_dir)
    port = state.host(name).port
    controller: list[float] = []
    host: list[float] = []
    for _ in range(sessions):
        host_before, own_before = host_cpu(), own_cpu_seconds()
        client = ssh_client(port, state.key_path, state.known_hosts_path)
        try:
            for _ in range(commands):
                _, stdout, _ = client.exec_command("true")
                stdout.channel.recv_exit_status()
        finally:
            client.close()
        controller.append(own_cpu_seconds() - own_before)
        time.sleep(TEARDOWN_S)
        host.append(host_cpu() - host_before)
    return statistics.median(controller), statistics.median(host)
