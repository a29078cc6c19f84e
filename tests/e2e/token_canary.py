"""A canary Hugging Face token followed through a real ``deploys/full.py``, and searched for everywhere after.

The pieces the token tests share (tests/e2e/test_hf_token.py as root, tests/e2e/test_sudo_user.py as a
sudoer):

- ``serve_hub_in_host``: the STAND-IN Hub (tests/standins/hf_hub.py; the real Hub is unreachable here) runs
  inside the sandbox host on its 127.0.0.1, serving the real Gemma GGUF as a gated repository (only the
  canary's bearer passes, so a finished download proves the token reached it) at a rate that makes the
  download last a few seconds; ``hub_model`` is the profile's ``model`` section pointing at it.
- ``deploy_with_canary``: runs the deploy as the README says (``HF_TOKEN=… pyinfra … deploys/full.py``) with
  ``-vvv --debug``, while tests/e2e/canary_probe.py samples every process of the host; then searches the host
  and this machine and returns every place the canary was found, each named.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pyinfra_run import REPO_ROOT, PyinfraResult, run_pyinfra

from rigforge.engines import UNIT_NAME
from rigforge.operations.files import UPLOAD_STAGING_DIR
from rigforge.sandbox import SandboxHost, exec_in
from rigforge.sandbox.docker import docker
from roles.weights import HF_TOKEN_FILE
from tests.standins.hf_hub import commit_id

HUB_SOURCE = REPO_ROOT / "tests" / "standins" / "hf_hub.py"
HUB_DIR = "/srv/standin-hf-hub"
HUB_UNIT = "standin-hf-hub.service"
HUB_PORT = 8739
HUB_REPO = "rigforge-test/gemma-3-270m-gguf"
HUB_REVISION = "main"
#: The model file is sent in about this many seconds: dozens of sampling rounds see the download under way.
DOWNLOAD_SECONDS = 6
PROBE_SOURCE = Path(__file__).with_name("canary_probe.py")
PROBE = "/usr/local/lib/rigforge-tests/canary_probe.py"
STOP_FILE = "/run/canary-probe.stop"
#: The token's operation as pyinfra names it in a run's results (the deploy's name, then the operation's).
TOKEN_OPERATION = f"Weights | Hugging Face token in {HF_TOKEN_FILE}"


def new_canary() -> str:
    """A fresh token shaped like a Hugging Face one (``hf_`` + 34 characters), unique to this run."""
    return "hf_" + secrets.token_hex(17)


def serve_hub_in_host(host: SandboxHost, model_file: Path, canary: str) -> None:
    """Start the stand-in Hub inside ``host`` on 127.0.0.1:HUB_PORT, serving ``model_file``, gated by ``canary``.

    The unit names only the token's sha256 (never the token); the probe script is installed beside it.
    """
    rate = model_file.stat().st_size / DOWNLOAD_SECONDS
    exec_in(host, f"mkdir -p {HUB_DIR}/files {os.path.dirname(PROBE)}")
    docker("cp", str(model_file), f"{host.container}:{HUB_DIR}/files/{model_file.name}")
    docker("cp", str(HUB_SOURCE), f"{host.container}:{HUB_DIR}/hf_hub.py")
    docker("cp", str(PROBE_SOURCE), f"{host.container}:{PROBE}")
    unit = (f"# STAND-IN Hugging Face Hub for rigforge's tests ({HUB_SOURCE.relative_to(REPO_ROOT)})\n"
            "[Service]\n"
            f"ExecStart=/usr/bin/python3 {HUB_DIR}/hf_hub.py --dir {HUB_DIR}/files --repo {HUB_REPO} "
            f"--revision {HUB_REVISION} --port {HUB_PORT} --lfs *.gguf --rate {rate:.0f} "
            f"--token-sha256 {hashlib.sha256(canary.encode()).hexdigest()}\n")
    exec_in(host, f"cat > /etc/systemd/system/{HUB_UNIT} && systemctl daemon-reload && systemctl start {HUB_UNIT}",
            input_text=unit)
    # Any HTTP answer (401: gated) means it listens; loading the model into memory takes a moment.
    ready = exec_in(host, f"for i in $(seq 150); do curl -s -o /dev/null http://127.0.0.1:{HUB_PORT}/ && exit 0; "
                          "sleep 0.2; done; exit 1")
    assert ready.returncode == 0, exec_in(host, f"journalctl -u {HUB_UNIT} --no-pager | tail -20").stdout


def hub_model() -> dict:
    """The profile's ``model`` section for the stand-in Hub: the sandbox's Gemma file, pinned to a commit."""
    return {"source": "huggingface", "repo_id": HUB_REPO, "revision": commit_id(HUB_REVISION),
            "allow_patterns": ["*.gguf"], "hf_endpoint": f"http://127.0.0.1:{HUB_PORT}"}


class ProcessSampler:
    """canary_probe.py's ``sample`` mode running in the host while a deploy runs (``with`` block)."""

    def __init__(self, host: SandboxHost, canary: str) -> None:
        self.host, self.canary = host, canary
        self.report: dict = {}

    def __enter__(self) -> ProcessSampler:
        exec_in(self.host, f"rm -f {STOP_FILE}")
        self._proc = subprocess.Popen(["docker", "exec", "-i", self.host.container, "python3", PROBE, "sample",
                                       STOP_FILE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
        assert self._proc.stdin is not None
        self._proc.stdin.write(self.canary + "\n")  # on stdin: an argument would be in its own cmdline
        self._proc.stdin.close()
        return self

    def __exit__(self, *exc: object) -> None:
        exec_in(self.host, f"touch {STOP_FILE}")
        assert self._proc.stdout is not None and self._proc.stderr is not None
        out, err = self._proc.stdout.read(), self._proc.stderr.read()  # both small: one JSON line, or an error
        assert self._proc.wait(timeout=60) == 0, err
        self.report = json.loads(out)


@dataclass
class CanaryRun:
    """One deploy with the canary: pyinfra's result, what the sampler and the search found, and where."""

    canary: str = field(repr=False)  # a failing assertion prints the run: never the token
    result: PyinfraResult = field(repr=False)
    sampled: dict
    host: dict
    places: list[str]


def deploy_with_canary(host: SandboxHost, inventory: Path, canary: str) -> CanaryRun:
    """``HF_TOKEN=canary pyinfra -vvv --debug INVENTORY deploys/full.py`` while sampling; then search everywhere."""
    since = time.time_ns()
    with ProcessSampler(host, canary) as sampler:
        result = run_pyinfra(inventory, "deploys/full.py", "-vvv", "--debug", check=False, env={"HF_TOKEN": canary})
    found = search_host(host, canary)
    places = ([f"host process (sampled during the run) {hit['place']}: {hit['command']}"
               for hit in sampler.report["hits"]]
              + [f"host {place}" for place in found["places"]]
              + output_places(canary, {"stdout": result.stdout, "stderr": result.stderr})
              + controller_file_places(canary, since, [REPO_ROOT, Path(tempfile.gettempdir())]))
    return CanaryRun(canary, result, sampler.report, found, places)


def search_host(host: SandboxHost, canary: str) -> dict:
    """canary_probe.py's ``search`` on the host: files, journal, processes, the engine unit, token file, staging."""
    proc = exec_in(host, ["python3", PROBE, "search", "--unit", UNIT_NAME, "--secret", HF_TOKEN_FILE,
                          "--staging", UPLOAD_STAGING_DIR], input_text=canary + "\n", timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def output_places(canary: str, outputs: dict[str, str]) -> list[str]:
    """Each line of pyinfra's output that holds the canary, as ``pyinfra stderr line N: …`` (redacted)."""
    return [f"pyinfra {stream} line {number}: {line.replace(canary, '<canary>')[:300]}"
            for stream, text in outputs.items()
            for number, line in enumerate(text.splitlines(), 1) if canary in line]


def controller_file_places(canary: str, since_ns: int, roots: list[Path]) -> list[str]:
    """Files under ``roots`` written since ``since_ns`` that hold the canary (results, anything rigforge wrote)."""
    needle = canary.encode()
    return [f"controller file {path}" for path in _written_since(roots, since_ns) if needle in _read(path)]


def _written_since(roots: list[Path], since_ns: int) -> Iterator[Path]:
    for root in roots:
        for folder, dirs, names in os.walk(root):  # symlinked folders (.venv, .cache) are not entered
            dirs[:] = [name for name in dirs if name != ".git"]
            for name in names:
                path = Path(folder) / name
                try:
                    if path.is_file() and not path.is_symlink() and path.stat().st_mtime_ns >= since_ns:
                        yield path
                except OSError:  # removed meanwhile (another test's temporary file)
                    continue


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def assert_token_only_in_its_file(run: CanaryRun) -> None:
    """The deploy worked, the download was watched, the token file is right, and the canary is nowhere else."""
    assert run.result.returncode == 0, run.result.stderr[-6000:].replace(run.canary, "<canary>")
    secret = run.host["secret"]
    assert secret == {"exists": True, "mode": "0o600", "owner": "0:0", "folder_mode": "0o700",
                      "holds_canary": True}, f"{HF_TOKEN_FILE}: {secret}"
    assert run.host["in_secrets_folder"] == [HF_TOKEN_FILE], (
        f"the file search, which must find the token file itself, found {run.host['in_secrets_folder']}")
    assert run.sampled["download_rounds"] >= 3, (
        f"the sampler never really saw the download: {run.sampled['download_rounds']} of "
        f"{run.sampled['rounds']} rounds")
    assert not run.places, "the canary token was found outside {}:\n  - {}".format(
        HF_TOKEN_FILE, "\n  - ".join(run.places))
    print(f"sampled every process {run.sampled['rounds']} times, the download running in "
          f"{run.sampled['download_rounds']} of them; read the unit files {run.host['unit_files_read']}; "
          f"shell histories {run.host['histories']}")
