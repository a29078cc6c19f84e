"""The Hugging Face token and the engine's API key end to end, logged in as root: a canary of each through one
real deploys/full.py, then searched for everywhere they could have ended up (tests/e2e/token_canary.py lists
the places); the engine, listening beyond loopback, refuses every request without the key.

The host's profile is the sandbox's with its model from the Hub and its engine on 0.0.0.0 (so ``engine.auth``
auto asks for a key): the real Gemma GGUF, served by a STAND-IN Hub (tests/standins/hf_hub.py) inside the
host on its own 127.0.0.1, because the real Hub cannot be reached from here; the stand-in is gated (only the
canary's bearer passes) and slow enough for the download to be watched. The client (huggingface_hub in the
rig's venv), the weights tool, llama.cpp's server, the bench, pyinfra and the host are real; requests come
from this machine to the host's own address, as from another machine of the rig's network. The token file as
a sudoer, and the staging folder, are tests/e2e/test_sudo_user.py's.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from pyinfra_run import REPO_ROOT, assert_no_changes, changed_ops, run_pyinfra
from serve_helpers import service_show
from token_canary import (
    TOKEN_OPERATION,
    Canary,
    api_key_canary,
    assert_canaries_only_in_their_files,
    assert_secret_file,
    canary_env,
    deploy_with_canaries,
    hf_canary,
    hub_model,
    output_places,
    search_host,
    serve_hub_in_host,
)

from rigforge.profile.loader import load_profile
from rigforge.sandbox import exec_in
from rigforge.sandbox.docker import docker
from rigforge.sandbox.model import ensure_gemma
from rigforge.serving.api_key import KEY_FILE, SHOW_COMMAND
from roles.api_key import KEY_OPERATION
from roles.weights import HF_TOKEN_FILE

#: One short bench cell: the results folder is searched too, so the bench runs, but speed is not the point.
BENCH = {"concurrency": [1], "repeats": 1, "cell_seconds": 2,
         "floors": [{"concurrency": 1, "input_tokens": 128, "min_output_tps": 0.05, "min_decode_tps_per_user": 0.05}]}
#: The engine on every interface of the host: beyond loopback, so the key is asked for (engine.auth auto).
ENGINE = {"host": "0.0.0.0"}
PORT = load_profile("sandbox").engine.port
MODEL_NAME = load_profile("sandbox").engine.served_model_name
SERVICE_OPERATION = "Service | Run rigforge-engine.service"
VERIFY = ["tests/verify/test_api_key.py", "tests/verify/test_service.py", "tests/verify/test_bench.py"]


@pytest.fixture(scope="module")
def rig(sandbox, tmp_path_factory: pytest.TempPathFactory):
    model = ensure_gemma(REPO_ROOT / ".sandbox" / "models")
    host = sandbox.fresh_host("hftoken")
    token, key = hf_canary(), api_key_canary()
    serve_hub_in_host(host, model, token.value)
    inventory = sandbox.write_inventory(tmp_path_factory.mktemp("hftoken") / "inventory.py", [host], "sandbox",
                                        {"model": hub_model(), "bench": BENCH, "engine": ENGINE})
    return host, inventory, deploy_with_canaries(host, inventory, [token, key])


def file_sha256(host, path: str) -> str:
    return exec_in(host, f"sha256sum {path}").stdout.split()[0]


def host_address(host) -> str:
    """The host's address on Docker's network: reached from this machine, as from another machine of the LAN."""
    return docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                  host.container).stdout.strip()


def http_status(url: str, key: str | None, body: dict | None = None) -> int:
    """The status of one request from this machine, with ``Authorization: Bearer <key>`` when a key is given."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=60) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def assert_closed_but_for(key: Canary | str, address: str) -> None:
    """No key and a wrong key: 401 on the API; the key: 200; /health needs none."""
    value = key.value if isinstance(key, Canary) else key
    root = f"http://{address}:{PORT}"
    completion = {"model": MODEL_NAME, "prompt": "Q: What is the capital of France?\nA:", "max_tokens": 2}
    assert http_status(f"{root}/health", None) == 200
    for path, body in (("/v1/models", None), ("/v1/completions", completion)):
        assert http_status(root + path, None, body) == 401, f"{path} without a key"
        assert http_status(root + path, "not-" + value, body) == 401, f"{path} with a wrong key"
        assert http_status(root + path, value, body) == 200, f"{path} with the key"


def test_the_token_and_the_key_reach_their_users_and_nothing_else(rig) -> None:
    host, _, run = rig
    assert_canaries_only_in_their_files(run)
    assert (REPO_ROOT / "results" / host.name / "latest" / "result.json").is_file(), "the bench left no results"
    assert "bench PASS" in run.redact(run.result.stderr)  # the bench sent the key it read on the rig


def test_beyond_loopback_only_the_key_is_served(rig) -> None:
    host, _, run = rig
    assert_closed_but_for(run.canaries[1], host_address(host))


def test_the_verify_suite_proves_the_key_on_the_rig(rig, sandbox) -> None:
    host = rig[0]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--hosts=paramiko://{host.name}",
         f"--ssh-config={sandbox.state_dir}/ssh_config", *VERIFY],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout, result.stdout[-2000:]


def test_second_run_plans_zero_changes_and_prints_no_secret(rig) -> None:
    _, inventory, run = rig
    plan = assert_no_changes(inventory, "deploys/full.py", "-vvv", "--debug", env=canary_env(run.canaries))
    assert not output_places(run.canaries, {"stdout": plan.stdout, "stderr": plan.stderr})


def test_a_new_token_and_key_replace_their_files_and_restart_the_engine_once(rig) -> None:
    host, inventory, run = rig
    rotated = [hf_canary(), api_key_canary()]
    before = service_show(host, "InvocationID", "NRestarts")
    done = run_pyinfra(inventory, "deploys/serve.py", env=canary_env(rotated))
    assert changed_ops(done) == [TOKEN_OPERATION, f"Service | {KEY_OPERATION}", SERVICE_OPERATION]
    assert done.stderr.count("rigforge-engine.service: restarting because") == 1
    after = service_show(host, "InvocationID", "NRestarts")
    assert after["InvocationID"] != before["InvocationID"] and after["NRestarts"] == before["NRestarts"]
    for canary in rotated:  # compared by hash: never shown
        assert file_sha256(host, canary.secret_file) == canary.content_sha256
    assert not output_places(rotated, {"stdout": done.stdout, "stderr": done.stderr})
    address = host_address(host)
    assert http_status(f"http://{address}:{PORT}/v1/models", run.canaries[1].value) == 401, "the old key still works"
    assert_closed_but_for(rotated[1], address)


def test_with_no_key_given_one_is_made_on_the_rig_and_never_shown(rig) -> None:
    host, inventory, _ = rig
    exec_in(host, f"rm {KEY_FILE}")
    done = run_pyinfra(inventory, "deploys/serve.py", env={"HF_TOKEN": None, "RIGFORGE_API_KEY": None})
    assert changed_ops(done) == [f"Service | {KEY_OPERATION}", SERVICE_OPERATION]
    assert f"a new key made on the rig in {KEY_FILE}, never sent or printed (show it on the rig with: " \
           f"{SHOW_COMMAND})" in done.stderr
    made = api_key_canary(exec_in(host, ["cat", KEY_FILE]).stdout.strip())  # read here only to search for it
    assert len(made.value) == 64 and int(made.value, 16) >= 0, "not 256 bits in hex"
    assert not output_places([made], {"stdout": done.stdout, "stderr": done.stderr})
    found = search_host(host, [made])["canaries"][made.name]
    assert_secret_file(made, found)
    assert not found["places"], f"the made key is outside {KEY_FILE}: {found['places']}"
    assert_closed_but_for(made, host_address(host))


def test_without_a_token_or_key_a_later_run_keeps_both_and_says_so(rig) -> None:
    host, inventory, _ = rig
    before = {path: file_sha256(host, path) for path in (HF_TOKEN_FILE, KEY_FILE)}
    done = run_pyinfra(inventory, "deploys/serve.py", env={"HF_TOKEN": None, "RIGFORGE_API_KEY": None})
    assert changed_ops(done) == []
    assert f"no HF_TOKEN given on this machine: {HF_TOKEN_FILE} left as it is" in done.stderr
    assert f"no RIGFORGE_API_KEY given on this machine: {KEY_FILE} kept as it is (show it on the rig with: " \
           f"{SHOW_COMMAND})" in done.stderr
    assert {path: file_sha256(host, path) for path in before} == before
    assert hashlib.sha256(b"").hexdigest() not in before.values()
