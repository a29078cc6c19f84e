"""Helpers of the serving e2e tests: a pausable SSH proxy, a file-access watcher, requests from inside a host.

- ``SshProxy``: a TCP relay on 127.0.0.1 in front of a sandbox host's sshd. It counts the bytes pyinfra
  sends and can stop relaying after N of them, so a weights upload is caught midway deterministically
  (then the test kills pyinfra) — no timing race.
- ``watch_file``: a transient unit on the host that logs every open/read of one file (inotify), to prove
  that a run did not read (hash, copy) the weights.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from pathlib import Path

from rigforge.sandbox import SandboxHost, exec_in
from tests.e2e.conftest import E2E_OVERRIDES, merged_overrides


class SshProxy:
    """Relay 127.0.0.1:<port> to ``target_port``; ``pause_after`` stops the upstream direction after N bytes."""

    def __init__(self, target_port: int, pause_after: int | None = None) -> None:
        self.target_port = target_port
        self.pause_after = pause_after
        self.sent = 0  # bytes relayed from the client (pyinfra) to sshd
        self.paused = threading.Event()
        self._closing = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self._sockets += [client, upstream]
            threading.Thread(target=self._relay, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._relay, args=(upstream, client, False), daemon=True).start()

    def _relay(self, source: socket.socket, sink: socket.socket, counted: bool) -> None:
        try:
            while not self._closing.is_set():
                if counted and self.pause_after is not None and self.sent >= self.pause_after:
                    self.paused.set()
                    self._closing.wait()
                    return
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
                if counted:
                    self.sent += len(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closing.set()
        for sock in self._sockets:
            sock.close()


def known_hosts_for_port(known_hosts: Path, from_port: int, to_port: int, dest: Path) -> Path:
    """A copy of the sandbox known_hosts where the host's key also answers on the proxy's port."""
    lines = [line.replace(f"[127.0.0.1]:{from_port} ", f"[127.0.0.1]:{to_port} ", 1)
             for line in known_hosts.read_text().splitlines() if line.startswith(f"[127.0.0.1]:{from_port} ")]
    dest.write_text("\n".join(lines) + "\n")
    return dest


def proxied_inventory(path: Path, state_dir: Path, host: SandboxHost, proxy: SshProxy, known_hosts: Path,
                      overrides: dict) -> Path:
    """An inventory reaching ``host`` through ``proxy`` (same profile resolution as the e2e inventories, over the
    same E2E_OVERRIDES: a run through it applies the profile the others apply)."""
    overrides = merged_overrides(E2E_OVERRIDES, overrides)
    path.write_text(
        "from rigforge.inventory import sandbox_hosts\n\n"
        f"hosts = [(name, {{**data, 'ssh_port': {proxy.port}, 'ssh_known_hosts_file': {str(known_hosts)!r}}})\n"
        f"         for name, data in sandbox_hosts({str(state_dir)!r}, 'sandbox', {overrides!r}, "
        f"names={[host.name]!r})]\n"
    )
    return path


_WATCHER = r"""
import ctypes, os, struct, sys
IN_ACCESS, IN_MODIFY, IN_OPEN = 0x1, 0x2, 0x20
path, log = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL("libc.so.6", use_errno=True)
fd = libc.inotify_init1(0)
if fd < 0 or libc.inotify_add_watch(fd, path.encode(), IN_ACCESS | IN_MODIFY | IN_OPEN) < 0:
    sys.exit("inotify failed: errno %d" % ctypes.get_errno())
out = open(log, "a", buffering=1)
out.write("ready\n")
names = {IN_ACCESS: "ACCESS", IN_MODIFY: "MODIFY", IN_OPEN: "OPEN"}
while True:
    data = os.read(fd, 4096)
    offset = 0
    while offset < len(data):
        wd, mask, cookie, length = struct.unpack_from("iIII", data, offset)
        offset += 16 + length
        out.write(" ".join(n for bit, n in names.items() if mask & bit) + "\n")
"""


def watch_file(host: SandboxHost, path: str, unit: str = "rigforge-test-watch") -> str:
    """Start logging opens/reads/writes of ``path`` on the host; returns the log path (see ``watched_events``)."""
    log = f"/run/{unit}.log"
    exec_in(host, f"cat > /run/{unit}.py", input_text=_WATCHER)
    started = exec_in(host, f"rm -f {log}; systemd-run --unit={unit} --collect python3 /run/{unit}.py {path} {log}")
    assert started.returncode == 0, started.stderr
    deadline = time.monotonic() + 30
    while "ready" not in exec_in(host, f"cat {log} 2>/dev/null").stdout:
        assert time.monotonic() < deadline, "the file watcher did not start"
        time.sleep(0.2)
    return log


def watched_events(host: SandboxHost, log: str, unit: str = "rigforge-test-watch") -> list[str]:
    """Stop the watcher and return the events it saw (after its ``ready`` line)."""
    exec_in(host, f"systemctl stop {unit}")
    lines = exec_in(host, f"cat {log}").stdout.splitlines()
    return lines[lines.index("ready") + 1:]


_COMPLETION = r"""
import json, sys, urllib.request
body = json.dumps({"model": sys.argv[2], "prompt": "Q: What is the capital of France?\nA:", "max_tokens": 4,
                   "temperature": 0, "top_k": 1, "stream": True}).encode()
request = urllib.request.Request(sys.argv[1] + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
text, chunks = "", 0
with urllib.request.urlopen(request, timeout=60) as response:
    for raw in response:
        line = raw.decode().strip()
        if line.startswith("data: ") and line != "data: [DONE]":
            chunks += 1
            text += json.loads(line[6:])["choices"][0]["text"]
models = json.load(urllib.request.urlopen(sys.argv[1] + "/v1/models", timeout=30))
print(json.dumps({"text": text, "chunks": chunks, "models": [m["id"] for m in models["data"]]}))
"""


def ask_capital_of_france(host: SandboxHost, base_url: str, model: str) -> dict:
    """Greedy streamed completion and the model list, requested from inside the host (the server binds loopback)."""
    exec_in(host, "cat > /run/rigforge-test-ask.py", input_text=_COMPLETION)
    answer = exec_in(host, f"python3 /run/rigforge-test-ask.py {base_url} {model}")
    assert answer.returncode == 0, answer.stderr
    return json.loads(answer.stdout)


def service_show(host: SandboxHost, *properties: str, unit: str = "rigforge-engine.service") -> dict[str, str]:
    """``systemctl show -p ...`` of the engine unit on the host."""
    out = exec_in(host, f"systemctl show {unit} -p {','.join(properties)}").stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def hold_port(host: SandboxHost, port: int, unit: str = "port-holder") -> int:
    """Start a process of the host's "owner" listening on 127.0.0.1:``port`` (a unit of its own); returns its pid.

    A listener that never accepts: an HTTP server would close health checks' connections itself and leave
    them in TIME_WAIT on the port, which blocks the engine's own bind for a minute after it is gone.
    SO_REUSEADDR: a healthy engine's own TIME_WAIT connections must not stop the holder from binding.
    """
    hold = ("import socket, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            f"s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(3600)")
    for command in (f"systemd-run --unit={unit} python3 -c {hold!r}",
                    f"timeout 20 sh -c 'until ss -Hltn \"sport = :{port}\" | grep -q .; do sleep 0.2; done'"):
        run = exec_in(host, command)
        assert run.returncode == 0, f"{command}: {run.stderr}"
    return int(service_show(host, "MainPID", unit=f"{unit}.service")["MainPID"])
