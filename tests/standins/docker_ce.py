"""STAND-IN Docker CE packages (sandbox tests only: Docker's apt repository is not reachable from here).

Builds ``docker-ce``, ``docker-ce-cli`` and ``containerd.io`` whose control fields are the real ones as
Docker publishes them, so apt resolves them exactly as it would the real packages (the conflict with
Debian's ``docker.io`` included):

- ``docker-ce``, ``docker-ce-cli``: Depends/Conflicts/Replaces/Breaks from Docker's packaging source,
  github.com/docker/docker-ce-packaging ``deb/common/control`` (commit 01a9b285e6bc): docker-ce
  ``Depends: containerd.io (>= 1.7.27), docker-ce-cli, iptables, nftables``, ``Conflicts: docker (<< 1.5~),
  docker-engine, docker.io``, ``Replaces: docker-engine, docker-ce-cli (<< 5:28.0.0)``; docker-ce-cli the same
  Conflicts, ``Replaces``/``Breaks: docker-ce (<< 5:0)``. ``${shlibs:Depends}`` is left out (no ELF files of
  their own here) and so are the Recommends of plugins the repository does not hold.
- ``containerd.io``: github.com/docker/containerd-packaging ``debian/control`` (commit 0e59ba52e2f6):
  ``Provides/Conflicts/Replaces: containerd, runc``.

What is inside is a stand-in too. ``docker-ce-cli`` carries the machine's real docker client (Debian's
``docker.io`` build, /usr/bin/docker). ``docker-ce`` carries docker.service and docker.socket as Docker ships
them (``Type=notify``, ``-H fd://``, ``ExecReload=/bin/kill -s HUP $MAINPID``) and a ``dockerd`` that is no
engine: it passes the Docker API on its socket through to the machine's real engine, whose socket the test
mounts in the host at ``ENGINE_SOCKET``, so the owner's containers, images and volumes are real ones. Like
dockerd, it loads daemon.json's ``runtimes`` when it starts and again on SIGHUP (a reload), and adds them to
``/info`` when that is a connection's first request (as curl, and rigforge's ``DockerEngine`` fact, ask it).
Its maintainer script enables and starts both units, as the real package's does.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

CE_VERSION = "5:28.5.1-1~debian.12~bookworm"
CONTAINERD_VERSION = "1.7.28-1~debian.12~bookworm"
ENGINE_SOCKET = "/srv/standin-engine/docker.sock"
CLI_SOURCE = Path("/usr/bin/docker")  # Debian's docker.io client on the machine running the tests
STANDIN = "STAND-IN for rigforge sandbox tests; fields as published by Docker"

CONTROLS = {
    "containerd.io": (CONTAINERD_VERSION, "Provides: containerd, runc\nConflicts: containerd, runc\n"
                                          "Replaces: containerd, runc\n"),
    "docker-ce-cli": (CE_VERSION, "Conflicts: docker (<< 1.5~), docker-engine, docker.io\n"
                                  "Replaces: docker-ce (<< 5:0)\nBreaks: docker-ce (<< 5:0)\n"),
    "docker-ce": (CE_VERSION, "Pre-Depends: init-system-helpers (>= 1.54~)\n"
                              "Depends: containerd.io (>= 1.7.27), docker-ce-cli, iptables, nftables\n"
                              "Conflicts: docker (<< 1.5~), docker-engine, docker.io\n"
                              "Replaces: docker-engine, docker-ce-cli (<< 5:28.0.0)\n"),
}

DOCKER_SERVICE = textwrap.dedent("""\
    [Unit]
    Description=Docker Application Container Engine (STAND-IN)
    Documentation=https://docs.docker.com
    After=network-online.target nss-lookup.target docker.socket firewalld.service containerd.service time-set.target
    Wants=network-online.target containerd.service
    Requires=docker.socket

    [Service]
    Type=notify
    ExecStart=/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock
    ExecReload=/bin/kill -s HUP $MAINPID
    TimeoutStartSec=0
    RestartSec=2
    Restart=always

    [Install]
    WantedBy=multi-user.target
""")

DOCKER_SOCKET_UNIT = textwrap.dedent("""\
    [Unit]
    Description=Docker Socket for the API

    [Socket]
    ListenStream=/run/docker.sock
    SocketMode=0660
    SocketUser=root
    SocketGroup=docker

    [Install]
    WantedBy=sockets.target
""")

POSTINST = textwrap.dedent("""\
    #!/bin/sh
    set -e
    if [ "$1" = configure ]; then
        getent group docker >/dev/null || groupadd --system docker
        systemctl daemon-reload
        systemctl enable docker.socket docker.service
        systemctl start docker.socket docker.service
    fi
""")

DOCKERD = textwrap.dedent('''\
    #!/usr/bin/python3
    """STAND-IN dockerd (rigforge sandbox tests): the Docker API passed through to the machine's engine."""
    import json, os, re, signal, socket, sys, threading

    ENGINE = "@ENGINE@"
    CONFIG = "/etc/docker/daemon.json"
    INFO = re.compile(rb"(/v[0-9.]+)?/info")
    loaded = {}


    def load(*_):
        # dockerd reads runtimes at start and on SIGHUP; a daemon.json it cannot read keeps the old ones.
        global loaded
        try:
            with open(CONFIG) as f:
                text = f.read()
            config = json.loads(text) if text.strip() else {}
            loaded = {k: {"path": v.get("path", "")} for k, v in (config.get("runtimes") or {}).items()}
        except FileNotFoundError:
            loaded = {}
        except ValueError:
            print("daemon.json is not valid JSON; runtimes left as they were", file=sys.stderr)


    def pipe(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (dst, src):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


    def answer_info(client, path):
        upstream = socket.socket(socket.AF_UNIX)
        upstream.connect(ENGINE)
        upstream.sendall(b"GET " + path + b" HTTP/1.0\\r\\nHost: docker\\r\\n\\r\\n")
        data = b""
        while chunk := upstream.recv(65536):
            data += chunk
        upstream.close()
        info = json.loads(data.split(b"\\r\\n\\r\\n", 1)[1])
        info["Runtimes"] = {**(info.get("Runtimes") or {}), **loaded}
        body = json.dumps(info).encode()
        client.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\nContent-Length: "
                       + str(len(body)).encode() + b"\\r\\nConnection: close\\r\\n\\r\\n" + body)
        client.close()


    def serve(client):
        head = b""
        while b"\\r\\n\\r\\n" not in head:
            chunk = client.recv(65536)
            if not chunk:
                client.close()
                return
            head += chunk
        request = head.split(b"\\r\\n", 1)[0].split()
        if len(request) >= 2 and request[0] == b"GET" and INFO.fullmatch(request[1].split(b"?")[0]):
            answer_info(client, request[1])
            return
        upstream = socket.socket(socket.AF_UNIX)
        upstream.connect(ENGINE)
        upstream.sendall(head)
        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
        pipe(client, upstream)


    def notify_ready():
        address = os.environ.get("NOTIFY_SOCKET")
        if address:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.connect("\\0" + address[1:] if address.startswith("@") else address)
            s.send(b"READY=1")


    load()
    signal.signal(signal.SIGHUP, load)
    if os.environ.get("LISTEN_FDS"):  # -H fd://: the socket docker.socket holds
        server = socket.socket(fileno=3)
    else:
        server = socket.socket(socket.AF_UNIX)
        if os.path.exists("/run/docker.sock"):
            os.unlink("/run/docker.sock")
        server.bind("/run/docker.sock")
        server.listen(64)
    notify_ready()
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()
''').replace("@ENGINE@", ENGINE_SOCKET)


def _build(work: Path, out_dir: Path, name: str, files: dict[str, tuple[str | Path, int]],
           postinst: str | None = None) -> Path:
    version, fields = CONTROLS[name]
    arch = subprocess.run(["dpkg", "--print-architecture"], check=True, capture_output=True, text=True).stdout.strip()
    tree = work / name
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: {arch}\nMaintainer: rigforge tests <tests@localhost>\n"
        f"{fields}Description: {STANDIN}\n")
    if postinst:
        (tree / "DEBIAN/postinst").write_text(postinst)
        (tree / "DEBIAN/postinst").chmod(0o755)
    for path, (content, mode) in files.items():
        target = tree / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, target)
        else:
            target.write_text(content)
        target.chmod(mode)
    deb = out_dir / f"{name}_{version.split(':', 1)[-1]}_{arch}.deb"  # without the epoch, as in Docker's pool
    # gzip -1: the real docker client is 45 MB and the default xz takes a minute on 2 cores.
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build", str(tree), str(deb)],
                   check=True, capture_output=True)
    return deb


def build_debs(work: Path, out_dir: Path) -> list[Path]:
    """Build the three stand-in packages into ``out_dir`` (``work`` is scratch space)."""
    doc = ("/usr/share/doc/{}/README.standin", 0o644)
    return [
        _build(work, out_dir, "containerd.io", {doc[0].format("containerd.io"): (STANDIN + "\n", doc[1])}),
        _build(work, out_dir, "docker-ce-cli", {"/usr/bin/docker": (CLI_SOURCE, 0o755)}),
        _build(work, out_dir, "docker-ce", {
            "/usr/bin/dockerd": (DOCKERD, 0o755),
            "/lib/systemd/system/docker.service": (DOCKER_SERVICE, 0o644),
            "/lib/systemd/system/docker.socket": (DOCKER_SOCKET_UNIT, 0o644),
        }, postinst=POSTINST),
    ]
