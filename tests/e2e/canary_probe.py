"""Look for a canary token inside a sandbox host; run there as root (``docker exec``), standard library only.

    python3 canary_probe.py sample STOP_FILE          # every process, every 0.1 s, until STOP_FILE exists
    python3 canary_probe.py search --unit U --secret F --staging D

The canary comes on stdin, never as an argument: on a command line it would be in this probe's own
/proc/PID/cmdline, the first place the probe looks. Both modes print one JSON document whose every string
has the canary replaced by ``<canary>``, so that what the test prints or keeps cannot leak it either.

``sample`` reads /proc/*/cmdline and /proc/*/environ of every process, round after round, and counts the
rounds in which the weights tool's download (``weights_tool.py hf-download``) was running: the proof that
the sampling saw the download under way. The environ of that tool itself is not judged (the one process
that may hold the token); its command line is.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import stat
import subprocess
import sys
import time

INTERVAL_S = 0.1
#: Top-level folders that hold no files of the host's own (kernel views); /run and /tmp are searched.
VIRTUAL_ROOTS = {"proc", "sys", "dev"}
REDACTED = "<canary>"


def redact(text: str, canary: str) -> str:
    """``text`` without the canary, cut to a length a failure message can show."""
    return text.replace(canary, REDACTED)[:300]


def read_bytes(path: str) -> bytes:
    """The content of ``path``; empty when it cannot be read (a process gone meanwhile)."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def read_proc(pid: str, name: str) -> bytes:
    return read_bytes(f"/proc/{pid}/{name}")


def is_weights_download(argv: list[bytes]) -> bool:
    """The weights tool's own download process (not the sudo or shell wrapping it)."""
    return len(argv) > 2 and argv[1].endswith(b"weights_tool.py") and b"hf-download" in argv


def scan_processes(canary: bytes, skip_tool_environ: bool) -> tuple[list[dict], bool]:
    """(the processes whose cmdline or environ holds the canary, whether the download runs now)."""
    hits, downloading = [], False
    for pid in (entry for entry in os.listdir("/proc") if entry.isdigit() and entry != str(os.getpid())):
        cmdline = read_proc(pid, "cmdline")
        argv = cmdline.split(b"\0")
        tool = is_weights_download(argv)
        downloading = downloading or tool
        command = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
        if canary in cmdline:
            hits.append({"place": f"/proc/{pid}/cmdline", "command": command})
        if not (tool and skip_tool_environ) and canary in read_proc(pid, "environ"):
            hits.append({"place": f"/proc/{pid}/environ", "command": command})
    return hits, downloading


def sample(canary: str, stop_file: str) -> dict:
    """Scan every process each INTERVAL_S until ``stop_file`` exists; the hits, first seen, and the counts."""
    seen: dict[tuple[str, str], dict] = {}
    rounds = download_rounds = 0
    while not os.path.exists(stop_file):
        hits, downloading = scan_processes(canary.encode(), skip_tool_environ=True)
        for hit in hits:
            seen.setdefault((hit["place"], hit["command"]), hit)
        rounds += 1
        download_rounds += downloading
        time.sleep(INTERVAL_S)
    return {"rounds": rounds, "download_rounds": download_rounds, "hits": list(seen.values())}


def files_with(canary: str) -> list[str]:
    """Every file of the host holding the canary (grep: fast over a few GB)."""
    roots = sorted(f"/{name}" for name in os.listdir("/") if name not in VIRTUAL_ROOTS)
    # -D skip: no FIFOs or sockets (a read would block); the canary goes in on stdin (-f -).
    found = subprocess.run(["grep", "-rlsF", "-D", "skip", "-f", "-", *roots], input=canary,
                           capture_output=True, text=True, check=False).stdout.split("\n")
    return [path for path in found if path]


def journal_hits(canary: str) -> list[str]:
    """The journal entries (every field: message, command line, unit) that hold the canary."""
    out = subprocess.run(["journalctl", "--no-pager", "-o", "json"], capture_output=True, text=True,
                         check=False).stdout
    hits = []
    for line in out.splitlines():
        if canary in line:
            entry = json.loads(line)
            source = entry.get("_SYSTEMD_UNIT") or entry.get("SYSLOG_IDENTIFIER") or entry.get("_COMM")
            hits.append(f"{source}: {entry.get('MESSAGE')}")
    return hits


def unit_files(unit: str) -> dict[str, str]:
    """The engine unit's properties that name its files and environment (``systemctl show``)."""
    out = subprocess.run(["systemctl", "show", unit, "-p", "FragmentPath", "-p", "DropInPaths", "-p",
                          "EnvironmentFiles", "-p", "Environment", "-p", "MainPID"],
                         capture_output=True, text=True, check=False).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def unit_hits(canary: str, unit: str) -> tuple[list[str], list[str]]:
    """(places of the engine unit holding the canary, the files of the unit that were read)."""
    props = unit_files(unit)
    hits = [f"{unit} Environment (systemctl show)"] if canary in props.get("Environment", "") else []
    # EnvironmentFiles reads "/etc/rigforge/engine.env (ignore_errors=yes)", one or more.
    env_files = [part.split(" (")[0] for part in props.get("EnvironmentFiles", "").split("\n") if part]
    paths = [props.get("FragmentPath", ""), *props.get("DropInPaths", "").split(), *env_files]
    read = [path for path in paths if path and os.path.isfile(path)]
    hits += [f"{unit} file {path}" for path in read if canary.encode() in read_bytes(path)]
    pid = props.get("MainPID", "0")
    if pid != "0":
        hits += [f"{unit} main process /proc/{pid}/{name}" for name in ("cmdline", "environ")
                 if canary.encode() in read_proc(pid, name)]
    return hits, read


def secret_state(canary: str, secret: str) -> dict:
    """Owner, mode and content check of the token file and its folder."""
    try:
        info, folder = os.stat(secret), os.stat(os.path.dirname(secret))
    except FileNotFoundError:
        return {"exists": False}
    with open(secret, encoding="utf-8") as handle:
        holds = handle.read() == f"HF_TOKEN={canary}\n"
    return {"exists": True, "mode": oct(stat.S_IMODE(info.st_mode)), "owner": f"{info.st_uid}:{info.st_gid}",
            "folder_mode": oct(stat.S_IMODE(folder.st_mode)), "holds_canary": holds}


def search(canary: str, unit: str, secret: str, staging: str) -> dict:
    """Every place of the host, after a run, that holds the canary; the token file's state; the staging folder."""
    processes, _ = scan_processes(canary.encode(), skip_tool_environ=False)
    units, unit_read = unit_hits(canary, unit)
    histories = sorted(glob.glob("/root/.*history") + glob.glob("/home/*/.*history"))
    files = files_with(canary)
    secrets_folder = os.path.dirname(secret) + "/"
    places = ([f"file {path}" + (" (shell history)" if path.endswith("history") else "")
               for path in files if not path.startswith(secrets_folder)]
              + [f"journal: {hit}" for hit in journal_hits(canary)]
              + [f"process {hit['place']}: {hit['command']}" for hit in processes] + units)
    # The token file itself is found too: the proof that the file search does find the canary where it is.
    return {"places": places, "in_secrets_folder": [path for path in files if path.startswith(secrets_folder)],
            "unit_files_read": unit_read, "histories": histories,
            "secret": secret_state(canary, secret),
            "staging": sorted(os.listdir(staging)) if os.path.isdir(staging) else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    sub.add_parser("sample").add_argument("stop_file")
    find = sub.add_parser("search")
    for option in ("--unit", "--secret", "--staging"):
        find.add_argument(option, required=True)
    args = parser.parse_args()
    canary = sys.stdin.readline().strip()
    if not canary:
        sys.exit("canary_probe: no canary on stdin")
    report = sample(canary, args.stop_file) if args.mode == "sample" else search(
        canary, args.unit, args.secret, args.staging)
    print(redact_all(report, canary))


def redact_all(report: dict, canary: str) -> str:
    """The report as JSON with the canary replaced everywhere (the strings are cut to 300 characters)."""
    def clean(value: object) -> object:
        if isinstance(value, str):
            return redact(value, canary)
        if isinstance(value, list):
            return [clean(item) for item in value]
        if isinstance(value, dict):
            return {key: clean(item) for key, item in value.items()}
        return value
    return json.dumps(clean(report))


if __name__ == "__main__":
    main()
