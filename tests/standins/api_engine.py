"""STAND-IN for vLLM's and SGLang's entry modules, run through rigforge/remote/engine_entry.py by the tests
(vLLM and SGLang need GPUs, which cannot exist here).

Like them it parses ``--api-key`` from ``sys.argv``, logs the arguments it parsed (vLLM's "non-default args",
SGLang's ``server_args=``), prints them, and starts a worker with ``spawn`` (vLLM's
``VLLM_WORKER_MULTIPROC_METHOD=spawn``, SGLang's schedulers), giving it the key as the engines give theirs: in its
pickled arguments, through a pipe. It writes to ``--report`` what it and its worker saw in their own /proc
entries (whether the key is in their command line or environment) and the sha256 of the key it got, never the
key. Standard library only: it runs in a container's python3 too.

    python3 engine_entry.py --api-key-file KEY -m standin.serve --port 8000 --report /tmp/report.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import multiprocessing
import os
import sys


def seen(name: str) -> bytes:
    """This process's /proc/self/<name>."""
    with open(f"/proc/self/{name}", "rb") as handle:
        return handle.read()


def worker(report: str, key_hex: str) -> None:
    """The spawned worker: whether the key it was given is in its own command line or environment."""
    key = bytes.fromhex(key_hex)
    with open(report, "w", encoding="utf-8") as out:
        json.dump({name: key in seen(name) for name in ("cmdline", "environ")}, out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port")
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--report", required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    logging.getLogger("standin").info("non-default args: %s", vars(args))
    print(f"server_args=ServerArgs(port={args.port}, api_key={args.api_key!r})", flush=True)
    sys.stderr.write(f"api_key={args.api_key}\n")
    child_report = args.report + ".child"
    spawn = multiprocessing.get_context("spawn")
    child = spawn.Process(target=worker, args=(child_report, args.api_key.encode().hex()))
    child.start()
    child.join()
    key = args.api_key.encode()
    with open(child_report, encoding="utf-8") as handle:
        child_saw = json.load(handle)
    with open(args.report, "w", encoding="utf-8") as out:
        json.dump({"key_sha256": hashlib.sha256(key).hexdigest(), "cmdline_has_key": key in seen("cmdline"),
                   "environ_has_key": key in seen("environ"),
                   "key_in_os_environ": any(args.api_key in value for value in os.environ.values()),
                   "argv0": sys.argv[0], "name": __name__, "child": child_saw, "child_exit": child.exitcode}, out)


if __name__ == "__main__":
    main()
