"""Look for canary secrets inside a sandbox host; run there as root (``docker exec``), standard library only.

    python3 canary_probe.py sample STOP_FILE [--tool-may-hold NAME]   # every process, every 0.1 s
    python3 canary_probe.py search --unit U --secret NAME=FILE [--secret NAME=FILE ...] --staging D

The canaries come on stdin, one ``NAME=VALUE`` line each (``hf=hf_…``, ``api-key=…``), never as arguments: on a
command line they would be in this probe's own /proc/PID/cmdline, the first place the probe looks. Both modes
print one JSON document whose every string has each canary replaced by ``<canary:NAME>``, so that what the test
prints or keeps cannot leak them either; every hit names its canary.

``sample`` reads /proc/*/cmdline and /proc/*/environ of every process, round after round, and counts the
rounds in which the weights tool's download (``weights_tool.py hf-download``) was running: the proof that
the sampling saw the download under way. The environ of that tool is not judged for the canary named by
``--tool-may-hold`` (the Hugging Face token: the one process that may hold it); its command line is.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import stat
import subprocess
import sys
import time

INTERVAL_S = 0.1
#: Top-level folders that hold no files of the host's own (kernel views); /run and /tmp are searched.
VIRTUAL_ROOTS = {"proc", "sys", "dev"}


Canaries = dict[str, str]  # name -> value


def redact(text: str, canaries: Canaries) -> str:
    """``text`` without any canary, cut to a length a failure message can show."""
    for name, value in canaries.items():
        text = text.replace(value, f"<canary:{name}>")
    return text[:300]


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


def scan_processes(canaries: Canaries, tool_may_hold: str | None) -> tuple[list[dict], bool]:
    """(the processes whose cmdline or environ holds a canary, whether the download runs now)."""
    hits, downloading = [], False
    for pid in (entry for entry in os.listdir("/proc") if entry.isdigit() and entry != str(os.getpid())):
        cmdline = read_proc(pid, "cmdline")
        argv = cmdline.split(b"\0")
        tool = is_weights_download(argv)
        downloading = downloading or tool
        command = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
        environ = read_proc(pid, "environ")
        for name, value in canaries.items():
            if value.encode() in cmdline:
                hits.append({"canary": name, "place": f"/proc/{pid}/cmdline", "command": command})
            if not (tool and name == tool_may_hold) and value.encode() in environ:
                hits.append({"canary": name, "place": f"/proc/{pid}/environ", "command": command})
    return hits, downloading


def sample(canaries: Canaries, stop_file: str, tool_may_hold: str | None) -> dict:
    """Scan every process each INTERVAL_S until ``stop_file`` exists; the hits, first seen, and the counts."""
    seen: dict[tuple[str, str, str], dict] = {}
    rounds = download_rounds = 0
    while not os.path.exists(stop_file):
        hits, downloading = scan_processes(canaries, tool_may_hold)
        for hit in hits:
            seen.setdefault((hit["canary"], hit["place"], hit["command"]), hit)
        rounds += 1
        download_rounds += downloading
        time.sleep(INTERVAL_S)
    return {"rounds": rounds, "download_rounds": download_rounds, "hits": list(seen.values())}


def files_with(canaries: Canaries) -> dict[str, list[str]]:
    """Per canary, every file of the host holding it (one grep over the whole host: fast over a few GB)."""
    roots = sorted(f"/{name}" for name in os.listdir("/") if name not in VIRTUAL_ROOTS)
    # -D skip: no FIFOs or sockets (a read would block); the canaries go in on stdin (-f -).
    found = subprocess.run(["grep", "-rlsF", "-D", "skip", "-f", "-", *roots], input="\n".join(canaries.values()),
                           capture_output=True, text=True, check=False).stdout.split("\n")
    paths = [path for path in found if path]
    return {name: [path for path in paths if value.encode() in read_bytes(path)] for name, value in canaries.items()}


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


def secret_state(secret: str) -> dict:
    """Owner and mode of a secret file and its folder, and its content's sha256 (never the content)."""
    try:
        info, folder = os.stat(secret), os.stat(os.path.dirname(secret))
    except FileNotFoundError:
        return {"exists": False}
    with open(secret, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    return {"exists": True, "mode": oct(stat.S_IMODE(info.st_mode)), "owner": f"{info.st_uid}:{info.st_gid}",
            "folder_mode": oct(stat.S_IMODE(folder.st_mode)), "sha256": digest}


def search_one(canary: str, secret: str, unit: str, processes: list[dict], files: list[str]) -> dict:
    """Every place of the host that holds one canary, outside its secret file's folder; that file's state."""
    units, unit_read = unit_hits(canary, unit)
    secrets_folder = os.path.dirname(secret) + "/"
    places = ([f"file {path}" + (" (shell history)" if path.endswith("history") else "")
               for path in files if not path.startswith(secrets_folder)]
              + [f"journal: {hit}" for hit in journal_hits(canary)]
              + [f"process {hit['place']}: {hit['command']}" for hit in processes] + units)
    # The secret file itself is found too: the proof that the file search does find the canary where it is.
    return {"places": places, "in_secrets_folder": [path for path in files if path.startswith(secrets_folder)],
            "unit_files_read": unit_read, "secret": secret_state(secret)}


def search(canaries: Canaries, unit: str, secrets: dict[str, str], staging: str) -> dict:
    """Per canary, every place of the host that holds it after a run; the shell histories; the staging folder."""
    processes, _ = scan_processes(canaries, tool_may_hold=None)
    files = files_with(canaries)
    found = {name: search_one(value, secrets[name], unit, [hit for hit in processes if hit["canary"] == name],
                              files[name])
             for name, value in canaries.items()}
    histories = sorted(glob.glob("/root/.*history") + glob.glob("/home/*/.*history"))
    return {"canaries": found, "histories": histories,
            "staging": sorted(os.listdir(staging)) if os.path.isdir(staging) else None}


def read_canaries(lines: list[str]) -> Canaries:
    """``NAME=VALUE`` lines (stdin) as a mapping; blank lines ignored."""
    pairs = [line.strip().split("=", 1) for line in lines if line.strip()]
    return {name: value for name, value in pairs if value}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    sampling = sub.add_parser("sample")
    sampling.add_argument("stop_file")
    sampling.add_argument("--tool-may-hold", default=None)
    find = sub.add_parser("search")
    for option in ("--unit", "--staging"):
        find.add_argument(option, required=True)
    find.add_argument("--secret", action="append", required=True, help="NAME=FILE: the canary's only place")
    args = parser.parse_args()
    canaries = read_canaries(sys.stdin.readlines())
    if not canaries:
        sys.exit("canary_probe: no canary on stdin")
    if args.mode == "sample":
        report = sample(canaries, args.stop_file, args.tool_may_hold)
    else:
        secrets = dict(item.split("=", 1) for item in args.secret)
        report = search(canaries, args.unit, secrets, args.staging)
    print(redact_all(report, canaries))


def redact_all(report: dict, canaries: Canaries) -> str:
    """The report as JSON with every canary replaced everywhere (the strings are cut to 300 characters)."""
    def clean(value: object) -> object:
        if isinstance(value, str):
            return redact(value, canaries)
        if isinstance(value, list):
            return [clean(item) for item in value]
        if isinstance(value, dict):
            return {key: clean(item) for key, item in value.items()}
        return value
    return json.dumps(clean(report))


if __name__ == "__main__":
    main()
