"""The main job on the sandbox rig, for real: deploys/full.py on a fresh Debian 12 systemd host.

A dry run with --diff first (it must show every file and change nothing), then the real run (its bench with the
chat probes), then a second plan that must show zero changes, then the testinfra verify suite against the host,
then a chat client nobody here wrote (OpenAI's SDK) against the served engine, and last the same host served
with a ChatML template forced on Gemma: the bench fails with the template line and the doctor names it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pyinfra_run import REPO_ROOT, assert_no_changes, run_pyinfra

from rigforge.bench.chat import leaked_tokens
from rigforge.bench_runs.plan import HOST_LATEST_NAME, HOST_RESULTS_DIR
from rigforge.profile.loader import load_profile
from rigforge.sandbox import exec_in
from rigforge.sandbox.model import ensure_gemma
from tests.e2e.chat_client import engine_tunnel, openai_session

PROFILE = load_profile("sandbox")
ANSI = re.compile(r"\x1b\[[0-9;]*m")

SNAPSHOT = "find /etc -xdev -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum; dpkg -l | sha256sum"


@pytest.fixture(scope="module")
def rig(sandbox, tmp_path_factory: pytest.TempPathFactory):
    # The sandbox profile uploads the real Gemma model from here (model.source: local).
    ensure_gemma(REPO_ROOT / ".sandbox" / "models")
    host = sandbox.fresh_host("full")
    inventory = sandbox.write_inventory(tmp_path_factory.mktemp("full") / "inventory.py", [host])
    before = exec_in(host, SNAPSHOT).stdout
    dry = run_pyinfra(inventory, "deploys/full.py", "--diff", dry=True)
    after_dry = exec_in(host, SNAPSHOT).stdout
    first = run_pyinfra(inventory, "deploys/full.py")
    return host, inventory, before, dry, after_dry, first


def test_dry_run_changes_nothing_and_diffs_every_file(rig) -> None:
    _, _, before, dry, after_dry, _ = rig
    assert before == after_dry, "a --dry run changed /etc or the installed packages"
    assert "Will create /etc/rigforge/profile.json" in dry.stderr
    assert '"profile_hash"' in dry.stderr, "the diff does not show the file's content"


def test_full_deploy_then_zero_changes(rig) -> None:
    _, inventory, _, _, _, first = rig
    assert first.returncode == 0
    assert_no_changes(inventory, "deploys/full.py")


def test_the_bench_passed_its_chat_probes_on_gemmas_own_template(rig) -> None:
    host = rig[0]
    result = json.loads(exec_in(host, f"cat {HOST_RESULTS_DIR}/{HOST_LATEST_NAME}").stdout)
    probes = {probe["name"]: probe for probe in result["sanity"]["probes"]}
    assert [name for name in probes if name.startswith("chat")] == ["chat_template", "chat_capital",
                                                                   "chat_arithmetic"]
    assert all(probe["passed"] for probe in probes.values()), probes
    assert result["server"]["chat_template"] == {
        "source": "gemma", "rendered": "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"}
    assert result["config"]["chat_probes"] == "path"  # a base model: the path is checked, not the answer


def test_verify_suite_passes(rig, sandbox) -> None:
    host = rig[0]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--hosts=paramiko://{host.name}",
         f"--ssh-config={Path(sandbox.state_dir) / 'ssh_config'}", "tests/verify"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout


def test_a_real_chat_client_gets_answers_without_template_tokens(rig, sandbox) -> None:
    """OpenAI's SDK through an SSH tunnel, as an owner would: models, completions, chat, streamed chat with usage."""
    host = rig[0]
    with engine_tunnel(Path(sandbox.state_dir) / "ssh_config", host.name, PROFILE.engine.port) as base_url:
        answers = openai_session(base_url, PROFILE.engine.served_model_name)
    print(json.dumps(answers, indent=1))
    assert answers["models"] == [PROFILE.engine.served_model_name]
    assert answers["completion"].startswith(" Paris") and answers["completion_tokens"] == 4
    for text in (answers["chat"], answers["stream"]):
        assert text.strip() and leaked_tokens(text) == [], answers
    assert answers["stream"] == answers["chat"]  # greedy both times: the same answer, streamed or not
    assert answers["stream_chunks"] >= 2 and answers["stream_finish"] in ("stop", "length")
    usage = answers["stream_usage"]
    assert usage["completion_tokens"] == answers["chat_tokens"] and usage["prompt_tokens"] > 0


def test_chatml_forced_on_gemma_fails_the_bench_and_the_doctor_names_it(rig, sandbox, tmp_path: Path) -> None:
    """The failure this guards against: llama.cpp's ChatML fallback on a model that does not know it."""
    host = rig[0]
    overrides = {"engine": {"flags": {"--chat-template": "chatml"}},
                 "bench": {"concurrency": [1], "repeats": 1, "cell_seconds": 2}}  # the probes decide; keep it short
    inventory = sandbox.write_inventory(tmp_path / "chatml.py", [host], "sandbox", overrides)
    failed = run_pyinfra(inventory, "deploys/full.py", check=False)
    output = ANSI.sub("", failed.stderr + failed.stdout)
    assert failed.returncode != 0, output[-3000:]
    assert ("probe chat_capital: FAILED chat_template_tokens: chat-template tokens <|im_start|>, <|im_end|> in the "
            "answer: the served chat template is not the model's; fix: serve the model's own chat template") in output
    assert "probe chat_template: FAILED chat_template: the served chat template is not the model's" in output
    known = re.search(r".*bench: known failure chat-template-not-the-models \(fail\): .*", output)
    assert known, output[-3000:]
    print(known.group(0))
    journal = exec_in(host, "journalctl -q -o short-iso SYSLOG_IDENTIFIER=rigforge-bench").stdout
    assert "FAILED chat_template_tokens:" in journal, journal
    print(journal)

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    doctor = subprocess.run([sys.executable, "-m", "rigforge.doctor", str(inventory)], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=300, check=False)
    print(doctor.stdout)
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr[-2000:]
    assert f"| {host.name} | bench | chat-template-not-the-models | fail |" in doctor.stdout
