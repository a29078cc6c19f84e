"""TEST-ONLY HOOK (never shipped in a role): an engine that runs at its own speed at every start.

On a rig the engine's speed differs from one start to the next (the FlashInfer autotuner alone moves single runs
±15 %, rig-facts §8.4); the sandbox's llama.cpp starts the same every time. To give each start a speed of its own,
this installs on a sandbox host a drop-in for the engine unit whose ``ExecStartPre`` (run as root, ``+``) draws a
CPU quota between ``low`` and ``high`` % (``shuf``) and sets it on the unit with ``systemctl set-property
--runtime`` before the engine process starts: llama.cpp's two threads then get 1.5 to 2 CPUs, a different share
at each start, while its one-thread recipe (one busy thread) is nearly untouched. Every draw is logged with its
time, so a test can say which quotas its starts got. Checked on this machine (a cgroup v1 host): the engine's
``cpu.cfs_quota_us`` is the draw (163000 for 163 %). ``set-property --runtime`` leaves the unit flagged
NeedDaemonReload, so the service role reloads systemd before its next look at the unit while the hook is on;
``steady_engine_speed`` reloads it once more.

Example::

    vary_engine_speed(host)            # every later start of rigforge-engine.service draws its own quota
    ...                                # tournaments, driver updates
    print(drawn_quotas(host))          # [183, 151, 197, ...]
    steady_engine_speed(host)
"""

from __future__ import annotations

from rigforge.sandbox import SandboxHost, exec_in
from rigforge.serving.engines import UNIT_NAME

DROPIN = f"/etc/systemd/system/{UNIT_NAME}.d/zz-test-only-random-speed.conf"
SCRIPT = "/usr/local/sbin/rigforge-test-only-random-speed"
LOG = "/var/log/rigforge-test-only-random-speed.log"


def vary_engine_speed(host: SandboxHost, low: int = 150, high: int = 200) -> None:
    """Install the drop-in: every later start of the engine unit gets a CPU quota drawn from ``low``..``high`` %."""
    script = (f"#!/bin/sh\n# TEST-ONLY (tests/e2e/engine_speed.py): a CPU quota of its own for each engine start.\n"
              f"quota=$(shuf -i {low}-{high} -n 1)\n"
              f"systemctl set-property --runtime {UNIT_NAME} CPUQuota=${{quota}}%\n"
              f"echo \"$(date -u +%FT%TZ) $quota\" >> {LOG}\n")
    install_start_hook(host, DROPIN, SCRIPT, script)


def install_start_hook(host: SandboxHost, dropin_path: str, script_path: str, script: str) -> None:
    """Run ``script`` (as root) before every later start of the engine unit, from a TEST-ONLY drop-in."""
    dropin = f"# TEST-ONLY (tests/e2e/engine_speed.py)\n[Service]\nExecStartPre=+{script_path}\n"
    done = exec_in(host, f"mkdir -p $(dirname {dropin_path}) && cat > {script_path} && chmod 755 {script_path} && "
                         f"printf '%s' '{dropin}' > {dropin_path} && systemctl daemon-reload", input_text=script)
    assert done.returncode == 0, done.stderr


def drawn_quotas(host: SandboxHost) -> list[int]:
    """The quotas drawn so far, in %, oldest first."""
    lines = exec_in(host, f"cat {LOG} 2>/dev/null").stdout.splitlines()
    return [int(line.split()[1]) for line in lines if len(line.split()) == 2]


def steady_engine_speed(host: SandboxHost) -> None:
    """Remove the drop-in and the quota (the engine keeps it until its next start)."""
    exec_in(host, f"rm -f {DROPIN} {SCRIPT} && systemctl set-property --runtime {UNIT_NAME} CPUQuota= ; "
                  "systemctl daemon-reload")
