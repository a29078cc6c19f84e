"""Power cuts in the serving layer's long steps (``deploys/serve.py``, sandbox profile): the weights upload, the
engine venv's pip install, the engine's restart and health wait. After each, the same command converges with
no manual step and a dry run plans nothing.

Real here: a Debian 12 host with systemd, SSH, xllamacpp from PyPI in the engine venv, Gemma 3 270M uploaded
with the ``local`` source, the real systemd unit and its health wait, and the power cut (``docker kill``: the
whole host SIGKILLed, started again by the test). Each step is caught by watching the host (the ``.part``
file, pip's process, the health wait's process), never by a timer.

Slow (a model upload, pip and an engine start each time): ``pytest -m slow tests/e2e/test_power_cut_serve.py``.
The tests share one host and run in file order:

1. the power cut in the middle of the weights upload (a fresh host, the first run): the same command resumes
   the upload at the last whole chunk and converges;
2. in the middle of pip filling the engine venv (its completion marker removed first, so the run rebuilds
   it): the same command rebuilds the venv whole;
3. while the engine restarts with a new flag and the run waits for it to be healthy: the same command finds
   the service running with its current inputs.

Each cut run ends with the one lost-connection line; each step ends with a dry run that plans nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from rigforge.connection.lost import lost_line
from rigforge.operations.venv import venv_marker
from rigforge.operations.weights import UPLOAD_CHUNK_BYTES
from rigforge.profile.loader import load_profile
from rigforge.sandbox import SandboxHost, exec_in
from rigforge.sandbox.model import ensure_gemma
from rigforge.serving.engines import LLAMA_VENV
from tests.e2e.conftest import Sandbox
from tests.e2e.interrupt import health_wait_running, processes
from tests.e2e.power_cut import power_cut, power_on, run_and_cut
from tests.e2e.pyinfra_run import REPO_ROOT, PyinfraResult, assert_no_changes, run_pyinfra
from tests.e2e.serve_helpers import ask_capital_of_france, service_show

pytestmark = pytest.mark.slow

DEPLOY = "deploys/serve.py"
PROFILE = load_profile("sandbox")
MODEL_FILE = f"{PROFILE.model.path}/{PROFILE.model.files[0].name}"
BASE_URL = f"http://127.0.0.1:{PROFILE.engine.port}"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Rig:
    sandbox: Sandbox
    host: SandboxHost
    overrides: dict
    tmp: Path

    def inventory(self, name: str, **changes: object) -> Path:
        return self.sandbox.write_inventory(self.tmp / f"{name}.py", [self.host], "sandbox",
                                            {**self.overrides, **changes})

    def cut(self, inventory: Path, name: str, ready: Callable[[], bool]) -> PyinfraResult:
        result = run_and_cut(inventory, DEPLOY, self.tmp / f"{name}.log", ready, lambda: power_cut(self.host))
        power_on(self.host, self.sandbox.state)
        return result


@pytest.fixture(scope="module")
def rig(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Rig:
    model = ensure_gemma(REPO_ROOT / ".cache" / "models")
    return Rig(sandbox, sandbox.fresh_host("cutserve"), {"model": {"local_path": str(model)}},
               tmp_path_factory.mktemp("cutserve"))


def assert_lost_in(result: PyinfraResult, name: str, operation_part: str) -> None:
    lost = [re.sub(r"^(\[[^]]+\])\s+", r"\1 ", ANSI.sub("", line).strip())
            for line in result.stderr.splitlines() if f"[{name}]" in line and "connection lost" in line]
    print("\n".join(lost))  # with -s: the docs quote it
    assert result.returncode != 0 and len(lost) == 1, result.stderr[-4000:]
    assert operation_part in lost[0] and lost[0].endswith(lost_line("", 0).split(": ", 1)[1]), lost[0]
    assert "Traceback" not in result.stderr


def converged(rig: Rig, inventory: Path) -> None:
    """The service healthy and answering, and a dry run that plans nothing."""
    assert service_show(rig.host, "ActiveState", "UnitFileState") == {"ActiveState": "active",
                                                                      "UnitFileState": "enabled"}
    assert ask_capital_of_france(rig.host, BASE_URL, PROFILE.engine.served_model_name)["text"].startswith(" Paris")
    assert_no_changes(inventory, DEPLOY)


def test_a_cut_in_the_weights_upload_resumes_at_the_last_whole_chunk(rig: Rig) -> None:
    inventory = rig.inventory("serve")
    part = f"{MODEL_FILE}.part"

    def uploading() -> bool:
        size = exec_in(rig.host, f"stat -c %s {part} 2>/dev/null").stdout.strip()
        return size.isdigit() and int(size) >= UPLOAD_CHUNK_BYTES

    cut = rig.cut(inventory, "weights", uploading)
    assert_lost_in(cut, rig.host.name, "Weights")
    assert exec_in(rig.host, f"test -e {MODEL_FILE}").returncode != 0  # never a final name on unverified bytes

    again = run_pyinfra(inventory, DEPLOY)
    output = again.stdout + again.stderr
    assert re.search(r"resuming the upload at ([0-9.]+) of", output), output[-4000:]
    assert exec_in(rig.host, f"sha256sum {MODEL_FILE}").stdout.split()[0] == PROFILE.model.files[0].sha256
    converged(rig, inventory)


def test_a_cut_in_the_engine_venv_install_rebuilds_it(rig: Rig) -> None:
    inventory = rig.inventory("serve")
    exec_in(rig.host, f"rm -f {venv_marker(LLAMA_VENV)}")
    cut = rig.cut(inventory, "venv", lambda: bool(processes(rig.host, f"{LLAMA_VENV}/bin/pip install")))
    assert_lost_in(cut, rig.host.name, "llama.cpp server venv")
    assert exec_in(rig.host, f"test -e {venv_marker(LLAMA_VENV)}").returncode != 0

    run_pyinfra(inventory, DEPLOY)
    assert exec_in(rig.host, f"cat {venv_marker(LLAMA_VENV)}").stdout.strip() == PROFILE.engine.native.package  # type: ignore[union-attr]
    converged(rig, inventory)


def test_a_cut_in_the_engine_restart_and_health_wait(rig: Rig) -> None:
    changed = rig.inventory("batch", engine={"flags": {"--batch-size": 256}})
    cut = rig.cut(changed, "restart", lambda: health_wait_running(rig.host))
    assert_lost_in(cut, rig.host.name, "Service")

    run_pyinfra(changed, DEPLOY)
    pid = service_show(rig.host, "MainPID")["MainPID"]
    assert "--batch-size\x00256" in exec_in(rig.host, f"cat /proc/{pid}/cmdline").stdout
    converged(rig, changed)
