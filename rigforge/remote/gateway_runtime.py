#!/usr/bin/env python3
"""The gateway's runtime API on its host (stdlib only): who serves what, a rig drained or returned, its state kept.

Talks to HAProxy's admin socket (root only). Commands:

    gateway_runtime.py show                          # JSON: one row per rig of every model's backend
    gateway_runtime.py set BACKEND SERVER STATE      # STATE: ready, drain or maint
    gateway_runtime.py save-state                    # each rig's state into the server-state file (before a reload)

Example::

    python3 /opt/rigforge/lib/gateway_runtime.py set model-gemma-3-270m rig1 drain
"""

from __future__ import annotations

import csv
import io
import json
import os
import socket
import sys

SOCKET = "/run/rigforge-gateway/admin.sock"
STATE_FILE = "/var/lib/rigforge/gateway/server-state"
STATES = ("ready", "drain", "maint")


def ask(command: str, path: str = SOCKET) -> str:
    """One command on the admin socket, its whole answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        sock.sendall(command.encode() + b"\n")
        chunks = []
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode()


def servers(stat_csv: str) -> list[dict[str, object]]:
    """The rigs of the model backends from ``show stat``: status (UP, DOWN, DRAIN, MAINT...) and requests in flight."""
    rows = csv.DictReader(io.StringIO(stat_csv.lstrip("# ")))
    return [{"backend": row["pxname"], "rig": row["svname"], "status": row["status"],
             "in_flight": int(row["scur"] or 0), "check": row.get("check_status", "")}
            for row in rows if row["pxname"].startswith("model-") and row["svname"] not in ("BACKEND", "FRONTEND")]


def main(argv: list[str]) -> int:
    if argv[:1] == ["show"]:
        print(json.dumps(servers(ask("show stat"))))
        return 0
    if len(argv) == 4 and argv[0] == "set" and argv[3] in STATES:
        answer = ask(f"set server {argv[1]}/{argv[2]} state {argv[3]}").strip()
        if answer:
            print(answer, file=sys.stderr)
            return 1
        return 0
    if argv[:1] == ["save-state"]:
        if not os.path.exists(SOCKET):
            return 0  # not running yet: nothing to keep
        text = ask("show servers state")
        os.makedirs(os.path.dirname(STATE_FILE), exist_ok=True)
        temporary = STATE_FILE + ".tmp"
        with open(temporary, "w") as out:
            out.write(text)
        os.replace(temporary, STATE_FILE)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
