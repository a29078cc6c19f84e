"""Canary secrets (a Hugging Face token, the engine's API key) followed through a real ``deploys/full.py``, and
searched for everywhere after.

The pieces the secret tests share (tests/e2e/test_hf_token.py as root, tests/e2e/test_sudo_user.py as a
sudoer):

- ``hf_canary``, ``api_key_canary``: a fresh random secret each, with the variable that gives it to pyinfra
  and the one file on the rig that may hold it (and what that file must hold).
- ``serve_hub_in_host``: the STAND-IN Hub (tests/standins/hf_hub.py; the real Hub is unreachable here) runs
  inside the sandbox host on its 127.0.0.1, serving the real Gemma GGUF as a gated repository (only the
  canary's bearer passes, so a finished download proves the token reached it) at a rate that makes the
  download last a few seconds; ``hub_model`` is the profile's ``model`` section pointing at it.
- ``deploy_with_canaries``: runs the deploy as docs/security.md says (``HF_TOKEN=… RIGFORGE_API_KEY=… pyinfra …
  deploys/full.py``) with ``-vvv --debug``, while tests/e2e/canary_probe.py samples every process of the host;
  then searches the host and this machine and returns every place a canary was found, each named.
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

from rigforge.operations.files import UPLOAD_STAGING_DIR
from rigforge.sandbox import SandboxHost, exec_in
from rigforge.sandbox.docker import docker
from rigforge.serving.api_key import CONTROLLER_VARIABLE, KEY_FILE
from rigforge.serving.engines import UNIT_NAME
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


@dataclass(frozen=True)
class Canary:
    """A secret unique to one test run: its name in reports, the variable that gives it, its only file on the rig."""

    name: str
    value: str = field(repr=False)  # a failing assertion prints the canary: never the secret
    variable: str
    secret_file: str
    content: str = field(repr=False)  # what its file must hold

    @property
    def content_sha256(self) -> str:
        return hashlib.sha256(self.content.encode()).hexdigest()


def new_canary() -> str:
    """A fresh token shaped like a Hugging Face one (``hf_`` + 34 characters), unique to this run."""
    return "hf_" + secrets.token_hex(17)


def hf_canary(value: str | None = None) -> Canary:
    """The Hugging Face token: ``HF_TOKEN`` here, ``HF_TOKEN=<token>`` in /etc/rigforge/secrets/hf.env."""
    value = value or new_canary()
    return Canary("hf", value, "HF_TOKEN", HF_TOKEN_FILE, f"HF_TOKEN={value}\n")


def api_key_canary(value: str | None = None) -> Canary:
    """The engine's API key: ``RIGFORGE_API_KEY`` here, the key alone in /etc/rigforge/secrets/engine-api-key."""
    value = value or secrets.token_urlsafe(32)
    return Canary("api-key", value, CONTROLLER_VARIABLE, KEY_FILE, f"{value}\n")


def canary_env(canaries: list[Canary]) -> dict[str, str]:
    """The environment that gives pyinfra these canaries."""
    return {canary.variable: canary.value for canary in canaries}


def canary_lines(canaries: list[Canary]) -> str:
    """canary_probe.py's stdin: ``NAME=VALUE`` per canary."""
    return "".join(f"{canary.name}={canary.value}\n" for canary in canaries)


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

    def __init__(self, host: SandboxHost, canaries: list[Canary]) -> None:
        self.host, self.canaries = host, canaries
        self.report: dict = {}

    def __enter__(self) -> ProcessSampler:
        exec_in(self.host, f"rm -f {STOP_FILE}")
        # Only the weights tool may hold the Hugging Face token in its environment (it reads the token file).
        self._proc = subprocess.Popen(["docker", "exec", "-i", self.host.container, "python3", PROBE, "sample",
                                       STOP_FILE, "--tool-may-hold", "hf"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self._proc.stdin is not None
        self._proc.stdin.write(canary_lines(self.canaries))  # on stdin: an argument would be in its own cmdline
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
    """One deploy with the canaries: pyinfra's result, what the sampler and the search found, and where."""

    canaries: list[Canary]
    result: PyinfraResult = field(repr=False)
    sampled: dict
    host: dict
    places: list[str]

    def redact(self, text: str) -> str:
        """``text`` with every canary replaced, for a failure message."""
        for canary in self.canaries:
            text = text.replace(canary.value, f"<canary:{canary.name}>")
        return text


def deploy_with_canaries(host: SandboxHost, inventory: Path, canaries: list[Canary]) -> CanaryRun:
    """``HF_TOKEN=… RIGFORGE_API_KEY=… pyinfra -vvv --debug INVENTORY deploys/full.py`` while sampling; then search
    the host and this machine for every canary."""
    since = time.time_ns()
    with ProcessSampler(host, canaries) as sampler:
        result = run_pyinfra(inventory, "deploys/full.py", "-vvv", "--debug", check=False, env=canary_env(canaries))
    found = search_host(host, canaries)
    places = ([f"{hit['canary']}: host process (sampled during the run) {hit['place']}: {hit['command']}"
               for hit in sampler.report["hits"]]
              + [f"{name}: host {place}" for name, report in found["canaries"].items() for place in report["places"]]
              + output_places(canaries, {"stdout": result.stdout, "stderr": result.stderr})
              + controller_file_places(canaries, since, [REPO_ROOT, Path(tempfile.gettempdir())]))
    return CanaryRun(canaries, result, sampler.report, found, places)


def search_host(host: SandboxHost, canaries: list[Canary]) -> dict:
    """canary_probe.py's ``search`` on the host: files, journal, processes, the engine unit, secret files, staging."""
    secret_args = [word for canary in canaries for word in ("--secret", f"{canary.name}={canary.secret_file}")]
    proc = exec_in(host, ["python3", PROBE, "search", "--unit", UNIT_NAME, *secret_args,
                          "--staging", UPLOAD_STAGING_DIR], input_text=canary_lines(canaries), timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def output_places(canaries: list[Canary], outputs: dict[str, str]) -> list[str]:
    """Each line of pyinfra's output that holds a canary, as ``NAME: pyinfra stderr line N: …`` (redacted)."""
    return [f"{canary.name}: pyinfra {stream} line {number}: {line.replace(canary.value, '<canary>')[:300]}"
            for canary in canaries for stream, text in outputs.items()
            for number, line in enumerate(text.splitlines(), 1) if canary.value in line]


def controller_file_places(canaries: list[Canary], since_ns: int, roots: list[Path]) -> list[str]:
    """Files under ``roots`` written since ``since_ns`` that hold a canary (results, anything rigforge wrote)."""
    written = [(path, _read(path)) for path in _written_since(roots, since_ns)]
    return [f"{canary.name}: controller file {path}" for canary in canaries for path, data in written
            if canary.value.encode() in data]


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


def assert_secret_file(canary: Canary, report: dict) -> None:
    """The canary's file on the rig: root's, 0600 in a 0700 folder, holding exactly what it must."""
    assert report["secret"] == {"exists": True, "mode": "0o600", "owner": "0:0", "folder_mode": "0o700",
                                "sha256": canary.content_sha256}, f"{canary.secret_file}: {report['secret']}"
    assert report["in_secrets_folder"] == [canary.secret_file], (
        f"the file search, which must find {canary.secret_file} itself, found {report['in_secrets_folder']}")


def assert_canaries_only_in_their_files(run: CanaryRun) -> None:
    """The deploy worked, the download was watched, each secret file is right, and no canary is anywhere else."""
    assert run.result.returncode == 0, run.redact(run.result.stderr[-6000:])
    for canary in run.canaries:
        assert_secret_file(canary, run.host["canaries"][canary.name])
    assert run.sampled["download_rounds"] >= 3, (
        f"the sampler never really saw the download: {run.sampled['download_rounds']} of "
        f"{run.sampled['rounds']} rounds")
    files = ", ".join(canary.secret_file for canary in run.canaries)
    assert not run.places, "a canary was found outside its file ({}):\n  - {}".format(files, "\n  - ".join(run.places))
    unit_files = {name: report["unit_files_read"] for name, report in run.host["canaries"].items()}
    print(f"sampled every process {run.sampled['rounds']} times, the download running in "
          f"{run.sampled['download_rounds']} of them; read the unit files {unit_files}; "
          f"shell histories {run.host['histories']}")
