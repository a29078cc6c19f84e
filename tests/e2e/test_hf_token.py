"""The Hugging Face token end to end, logged in as root: a canary token through a real deploys/full.py, then
searched for everywhere it could have ended up (tests/e2e/token_canary.py lists the places).

The host's profile is the sandbox's with its model from the Hub: the real Gemma GGUF, served by a STAND-IN Hub
(tests/standins/hf_hub.py) inside the host on its own 127.0.0.1, because the real Hub cannot be reached from
here; the stand-in is gated (only the canary's bearer passes) and slow enough for the download to be watched.
The client (huggingface_hub in the rig's venv), the weights tool, pyinfra and the host are real. The token
file as a sudoer, and the staging folder, are tests/e2e/test_sudo_user.py's.
"""

from __future__ import annotations

import hashlib

import pytest
from pyinfra_run import REPO_ROOT, assert_no_changes, changed_ops, run_pyinfra
from token_canary import (
    TOKEN_OPERATION,
    assert_token_only_in_its_file,
    deploy_with_canary,
    hub_model,
    new_canary,
    output_places,
    serve_hub_in_host,
)

from rigforge.sandbox import exec_in
from rigforge.sandbox.model import ensure_gemma
from roles.weights import HF_TOKEN_FILE

#: One short bench cell: the results folder is searched too, so the bench runs, but speed is not the point.
BENCH = {"concurrency": [1], "repeats": 1, "cell_seconds": 2,
         "floors": [{"concurrency": 1, "input_tokens": 128, "min_output_tps": 0.05, "min_decode_tps_per_user": 0.05}]}


@pytest.fixture(scope="module")
def rig(sandbox, tmp_path_factory: pytest.TempPathFactory):
    model = ensure_gemma(REPO_ROOT / ".sandbox" / "models")
    host = sandbox.fresh_host("hftoken")
    canary = new_canary()
    serve_hub_in_host(host, model, canary)
    inventory = sandbox.write_inventory(tmp_path_factory.mktemp("hftoken") / "inventory.py", [host], "sandbox",
                                        {"model": hub_model(), "bench": BENCH})
    return host, inventory, deploy_with_canary(host, inventory, canary)


def token_file_sha256(host) -> str:
    return exec_in(host, f"sha256sum {HF_TOKEN_FILE}").stdout.split()[0]


def test_the_token_reaches_the_hub_and_nothing_else(rig) -> None:
    host, _, run = rig
    assert_token_only_in_its_file(run)
    assert (REPO_ROOT / "results" / host.name / "latest" / "result.json").is_file(), "the bench left no results"


def test_second_run_plans_zero_changes_and_prints_no_token(rig) -> None:
    _, inventory, run = rig
    plan = assert_no_changes(inventory, "deploys/full.py", "-vvv", "--debug", env={"HF_TOKEN": run.canary})
    assert not output_places(run.canary, {"stdout": plan.stdout, "stderr": plan.stderr})


def test_a_changed_token_replaces_the_file_in_one_change(rig) -> None:
    host, inventory, _ = rig
    rotated = new_canary()
    done = run_pyinfra(inventory, "deploys/serve.py", env={"HF_TOKEN": rotated})
    assert changed_ops(done) == [TOKEN_OPERATION]
    expected = hashlib.sha256(f"HF_TOKEN={rotated}\n".encode()).hexdigest()  # compared by hash: never shown
    assert token_file_sha256(host) == expected
    assert not output_places(rotated, {"stdout": done.stdout, "stderr": done.stderr})


def test_without_a_token_a_later_run_keeps_the_file_and_says_so(rig) -> None:
    host, inventory, _ = rig
    before = token_file_sha256(host)
    done = run_pyinfra(inventory, "deploys/serve.py", env={"HF_TOKEN": None})
    assert changed_ops(done) == []
    assert f"no HF_TOKEN given on this machine: {HF_TOKEN_FILE} left as it is" in done.stderr
    assert token_file_sha256(host) == before
