"""Sandbox hosts: real Debian 12 systemd hosts in Docker containers, reached over SSH on 127.0.0.1.

Each host is a container ``rigforge-<name>`` (label ``rigforge.sandbox=1``) that boots systemd as
PID 1, publishes its sshd on a fixed loopback port and comes back by itself after ``systemctl
reboot`` (``--restart always``). ``up`` writes ``state_dir/state.json``, an SSH key pair and a
``known_hosts`` file with every host's own host key, so pyinfra connects with strict host-key
checking on. Everything is idempotent: ``up`` twice reuses the running hosts.

Reboots: /proc/uptime and the kernel boot id are the machine's kernel's, not the host's. pyinfra's
``server.reboot`` confirms a reboot by uptime, so on a sandbox host it reconnects but never sees
the reboot and fails after its ``reboot_timeout``. A marker in /run (a fresh tmpfs at every boot,
on rigs too) tells a reboot apart: ``boot_token`` and ``wait_rebooted`` use one.

Example::

    from rigforge.sandbox import up, down

    state = up(["rig1", "rig2"])          # or up(2)
    data = state.host_data(state.host("rig1"))  # pyinfra host data
    down()

CLI: ``python -m rigforge.sandbox`` (``rigforge/sandbox/__main__.py``).
"""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

from rigforge.sandbox.docker import (
    SandboxError,
    container_name,
    create_container,
    docker,
    ensure_docker,
    file_lock,
    has_docker_socket,
    inspect_container,
    published_port,
    trust_machine_cas,
)
from rigforge.sandbox.image import build_image
from rigforge.sandbox.ssh import ensure_key_pair, host_key_line, ssh_login_works, update_known_hosts
from rigforge.sandbox.state import (
    DEFAULT_STATE_DIR,
    SandboxHost,
    SandboxState,
    host_names,
    load_or_empty_state,
    load_state,
    save_state,
)

__all__ = ["SandboxError", "SandboxHost", "SandboxState", "boot_token", "build_image", "down", "ensure_docker",
           "exec_in", "load_state", "reset", "status", "up", "wait_ready", "wait_rebooted"]

READY_TIMEOUT_S = 180.0
BOOT_TOKEN_PATH = "/run/rigforge-boot-token"


def _start_host(name: str, image: str, mount_docker_socket: bool,
                port: int | None = None) -> tuple[SandboxHost, str]:
    """Create, start or reuse the container of ``name``; return the host and what was done."""
    container = container_name(name)
    info = inspect_container(container)
    if info is None:
        port = create_container(name, image, mount_docker_socket, port)
        return SandboxHost(name, container, port), "created"
    if has_docker_socket(info) != mount_docker_socket:
        raise SandboxError(f"{container} exists {'with' if has_docker_socket(info) else 'without'} the docker "
                           f"socket mounted; run `python -m rigforge.sandbox down {name}` first")
    if info["Config"]["Image"] != image:
        print(f"sandbox: {name} runs {info['Config']['Image']}, not {image}; `reset {name}` to renew it")
    host = SandboxHost(name, container, published_port(info))
    if info["State"]["Running"]:
        return host, "reused"
    docker("start", container)
    return host, "started"


def exec_in(host: SandboxHost, cmd: str | list[str], input_text: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in the host through ``docker exec`` (for test assertions; deploys use SSH)."""
    argv = ["sh", "-c", cmd] if isinstance(cmd, str) else cmd
    # -i only with input: otherwise docker would attach the caller's own stdin.
    attach = ["-i"] if input_text is not None else []
    return docker("exec", *attach, host.container, *argv, check=False, input_text=input_text, timeout=timeout)


def _install_authorized_key(host: SandboxHost, public_key: str) -> None:
    script = ("install -d -m 0700 /root/.ssh && cat > /root/.ssh/authorized_keys"
              " && chmod 0600 /root/.ssh/authorized_keys")
    proc = exec_in(host, script, input_text=public_key)
    if proc.returncode != 0:
        raise SandboxError(f"cannot install the SSH key in {host.name}: {proc.stderr.strip()}")


def _system_state(host: SandboxHost) -> str:
    proc = exec_in(host, ["systemctl", "is-system-running"], timeout=30)
    return proc.stdout.strip() or "unreachable"


def wait_ready(host: SandboxHost, state: SandboxState, timeout: float = READY_TIMEOUT_S) -> str:
    """Wait until systemd is up (running or degraded) and SSH with strict host keys logs in.

    Returns the systemd state; prints the failed units when degraded.
    """
    deadline = time.monotonic() + timeout
    system = _system_state(host)
    while system not in ("running", "degraded"):
        if time.monotonic() > deadline:
            raise SandboxError(f"{host.name}: systemd not up after {timeout:.0f}s (state: {system})")
        time.sleep(0.5)
        system = _system_state(host)
    if system == "degraded":
        failed = exec_in(host, "systemctl --failed --no-legend --plain").stdout.strip()
        print(f"sandbox: {host.name} is degraded; failed units:\n{failed}")
    while not ssh_login_works(host.port, state.key_path, state.known_hosts_path):
        if time.monotonic() > deadline:
            raise SandboxError(f"{host.name}: no SSH login on 127.0.0.1:{host.port} after {timeout:.0f}s")
        time.sleep(0.5)
    return system


def up(names: list[str] | int, state_dir: Path = DEFAULT_STATE_DIR,
       mount_docker_socket: bool = False) -> SandboxState:
    """Start (or reuse) sandbox hosts, make them reachable by SSH and record them in ``state_dir``.

    + names: host names (also hostnames), or a count N for ``rig1..rigN``
    + state_dir: where state.json, the key pair and known_hosts live
    + mount_docker_socket: bind-mount the machine's docker socket into new hosts
    """
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(state_dir / ".lock"):
        return _up(host_names(names), state_dir, mount_docker_socket)


def _up(names: list[str], state_dir: Path, mount_docker_socket: bool,
        ports: dict[str, int] | None = None) -> SandboxState:
    """Bring up ``names`` (``state_dir`` locked); ``ports``: ports wished for new containers."""
    started = time.monotonic()
    ensure_docker()
    image = build_image()
    state = load_or_empty_state(state_dir)
    state.image = image
    public_key = ensure_key_pair(state.key_path)
    actions: dict[str, str] = {}
    for name in names:
        host, actions[name] = _start_host(name, image, mount_docker_socket, (ports or {}).get(name))
        state.hosts = [h for h in state.hosts if h.name != name] + [host]
        _install_authorized_key(host, public_key)
    for name in actions:
        host = state.host(name)
        system = _boot_and_record(host, state)
        trust_machine_cas(host.container)
        print(f"sandbox: {name} {actions[name]}, systemd {system}, ssh on 127.0.0.1:{host.port}", flush=True)
    save_state(state_dir, state)
    counts = ", ".join(f"{list(actions.values()).count(a)} {a}" for a in sorted(set(actions.values())))
    print(f"sandbox: {len(actions)} host(s) up ({counts}) in {time.monotonic() - started:.1f}s; "
          f"state in {state_dir / 'state.json'}", flush=True)
    return state


def read_host_public_key(container: str) -> str | None:
    """Return the container's ed25519 SSH host public key, or None while it has none yet."""
    proc = docker("exec", container, "cat", "/etc/ssh/ssh_host_ed25519_key.pub", check=False, timeout=30)
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


def _boot_and_record(host: SandboxHost, state: SandboxState, timeout: float = READY_TIMEOUT_S) -> str:
    """Wait for systemd, record the host's SSH host key into known_hosts, then check an SSH login."""
    deadline = time.monotonic() + timeout
    while (key := read_host_public_key(host.container)) is None:
        if time.monotonic() > deadline:
            raise SandboxError(f"{host.name}: no SSH host key after {timeout:.0f}s")
        time.sleep(0.5)
    update_known_hosts(state.known_hosts_path, {host.port: host_key_line(host.port, key)})
    return wait_ready(host, state, max(deadline - time.monotonic(), 1.0))


def down(names: list[str] | None = None, state_dir: Path = DEFAULT_STATE_DIR) -> list[str]:
    """Remove sandbox containers (every one ``state_dir`` knows when ``names`` is None); return them.

    Their entries leave ``state_dir``'s state.json and known_hosts. Hosts of other state directories (another
    checkout's sandbox, a test session running beside this one) are never touched.
    """
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(state_dir / ".lock"):
        return _down(names, state_dir)


def _down(names: list[str] | None, state_dir: Path) -> list[str]:
    if names is None:
        known = load_state(state_dir).hosts if (state_dir / "state.json").exists() else []
        containers = [host.container for host in known]
    else:
        containers = [container_name(name) for name in names]
    for container in containers:
        docker("rm", "-f", "-v", container, check=False)
    if (state_dir / "state.json").exists():
        state = load_state(state_dir)
        gone = [h for h in state.hosts if h.container in containers]
        state.hosts = [h for h in state.hosts if h not in gone]
        update_known_hosts(state.known_hosts_path, {h.port: None for h in gone})
        save_state(state_dir, state)
    print(f"sandbox: removed {len(containers)} container(s)", flush=True)
    return containers


def reset(name: str, state_dir: Path = DEFAULT_STATE_DIR) -> SandboxHost:
    """Remove the host ``name`` and make it again from the image (same port, new SSH host key)."""
    state_dir = Path(state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    info = inspect_container(container_name(name))
    socket_mounted = info is not None and has_docker_socket(info)
    ports = {name: published_port(info)} if info is not None else None
    with file_lock(state_dir / ".lock"):
        _down([name], state_dir)
        return _up([name], state_dir, socket_mounted, ports).host(name)


def boot_token(host: SandboxHost) -> str:
    """Return a token unique to the host's current boot (kept in /run, a fresh tmpfs at each boot).

    /proc/uptime and the kernel boot id belong to the machine's kernel, so they cannot tell that a
    container host rebooted; a changed token can.
    """
    script = f"test -s {BOOT_TOKEN_PATH} || echo {uuid.uuid4().hex} > {BOOT_TOKEN_PATH}; cat {BOOT_TOKEN_PATH}"
    proc = exec_in(host, script)
    if proc.returncode != 0:
        raise SandboxError(f"{host.name}: cannot read the boot token: {proc.stderr.strip()}")
    return proc.stdout.strip()


def wait_rebooted(host: SandboxHost, state: SandboxState, token_before: str,
                  timeout: float = READY_TIMEOUT_S) -> str:
    """Wait until ``host`` has rebooted since ``token_before`` was read and is ready again."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if _system_state(host) in ("running", "degraded") and boot_token(host) != token_before:
                break
        except SandboxError:
            pass  # the container is between stop and start
        if time.monotonic() > deadline:
            raise SandboxError(f"{host.name}: no reboot seen within {timeout:.0f}s")
        time.sleep(0.5)
    return wait_ready(host, state, max(deadline - time.monotonic(), 1.0))


def status(state_dir: Path = DEFAULT_STATE_DIR) -> list[tuple[str, str, str]]:
    """Return (host, container state, systemd state) for every host in the state."""
    rows = []
    for host in load_state(state_dir).hosts:
        info = inspect_container(host.container)
        running = info is not None and info["State"]["Running"]
        container = "missing" if info is None else info["State"]["Status"]
        rows.append((host.name, container, _system_state(host) if running else "-"))
    return rows
