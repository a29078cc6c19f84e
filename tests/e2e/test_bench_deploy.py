"""The smoke benchmark deployed for real: a sandbox host serving Gemma 3 270M under systemd, then broken models.

One host for the module (serving is the slow part): ``deploys/serve.py`` brings up llama.cpp's server
(xllamacpp) with Gemma, ``deploys/bench.py`` measures it from the host itself, and the results come
home under ``$RIGFORGE_RESULTS_DIR/<host>/``. Then the same host serves two tiny GGUF models written
here (random weights: garbage; a one-token loop: repetition), and the bench deploy must fail naming
the check. The engine's ``--metrics`` is switched on through the inventory so the server's own
token counter can be compared with the usage totals.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pyinfra_run import REPO_ROOT, PyinfraResult, assert_no_changes, run_pyinfra

from rigforge.bench_runs.plan import RESULTS_DIR_VARIABLE
from rigforge.operations.lock import RELEASE_NAME
from rigforge.sandbox import SandboxHost, exec_in
from rigforge.sandbox.model import ensure_gemma
from tests.bench_support.gguf_models import write_loop_gguf, write_random_gguf

if TYPE_CHECKING:
    from conftest import Sandbox

SMOKE_OP = "Bench | Smoke benchmark against http://127.0.0.1:8080"
#: After the bench, the rig goes back in the gateway's rotation (roles/drain.py: nothing to do where no gateway
#: took it out), then the lock goes.
RETURN_OP = "Put {host} back in the gateway's rotation (its bench passed)"

@dataclass(frozen=True)
class ServedHost:
    """The module's host, its Gemma inventory, and where the bench results land on this machine."""

    sandbox: Sandbox
    host: SandboxHost
    inventory: Path
    results: Path
    work: Path


def model_overrides(path: Path) -> dict[str, Any]:
    """Profile overrides that make the host serve ``path`` (uploaded by the weights role, verified by sha256)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return {
        "model": {"source": "local", "local_path": str(path), "path": f"/srv/models/{path.stem}", "size_gb": 0.1,
                  "files": [{"name": path.name, "sha256": digest, "size": path.stat().st_size}],
                  # A test model of a few thousand parameters: Gemma's count and quantisation, which bound the
                  # size from below at load, are not its own.
                  "parameters": None, "quantisation": None},
        # One cell is enough to show a broken model failing by name.
        "bench": {"concurrency": [1]},
    }


@pytest.fixture(scope="module")
def served(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedHost]:
    """A fresh host serving Gemma through deploys/serve.py; bench results go to a temporary folder."""
    ensure_gemma(REPO_ROOT / ".sandbox" / "models")  # the sandbox profile's model.local_path
    work = tmp_path_factory.mktemp("bench-deploy")
    host = sandbox.fresh_host("bench")
    inventory = sandbox.write_inventory(work / "inventory.py", [host], "sandbox")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(RESULTS_DIR_VARIABLE, str(work / "results"))
        run_pyinfra(inventory, "deploys/serve.py")
        yield ServedHost(sandbox, host, inventory, work / "results", work)


def latest_result(served: ServedHost) -> tuple[Path, dict[str, Any]]:
    """The controller's newest run folder for the host, and its result."""
    run_dir = (served.results / served.host.name / "latest").resolve()
    return run_dir, json.loads((run_dir / "result.json").read_text())


def serve_and_bench(served: ServedHost, model: Path) -> PyinfraResult:
    """Serve ``model`` on the module's host, then run the bench deploy against it (its failure is expected)."""
    inventory = served.sandbox.write_inventory(served.work / f"inventory-{model.stem}.py", [served.host], "sandbox",
                                               model_overrides(model))
    run_pyinfra(inventory, "deploys/serve.py")
    return run_pyinfra(inventory, "deploys/bench.py", check=False)


def test_bench_deploy_measures_gemma_and_brings_the_results_home(served: ServedHost) -> None:
    run = run_pyinfra(served.inventory, "deploys/bench.py")

    output = run.stderr
    assert "cell C=1 in=128 out=24: ok" in output  # the client's progress, streamed from the host
    assert "| C | in | out | status |" in output and "bench verdict: PASS" in output
    assert f"bench PASS on {served.host.name}: 3/3 cells ok" in output
    run_dir, result = latest_result(served)
    assert result["status"] == "ok", result["failed_checks"]
    metadata = result["metadata"]
    assert (metadata["profile"], metadata["host"], metadata["engine"]) == ("sandbox", served.host.name, "llama.cpp")
    assert metadata["engine_package"].startswith("xllamacpp==")
    assert metadata["model_sha256"] == {"gemma-3-270m-q4_k_m.gguf": (
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818")}
    probes = {probe["name"]: probe["passed"] for probe in result["sanity"]["probes"]}
    assert probes == dict.fromkeys(["probe_capital", "probe_arithmetic", "chat_template", "chat_capital",
                                    "chat_arithmetic"], True)
    for cell in result["cells"]:
        requests, metrics, server = cell["requests"], cell["metrics"], cell["server"]
        assert all(tokens == 24 for tokens in requests["output_lens"])
        assert metrics["total_output_tokens"] == sum(requests["output_lens"])  # numbers from usage
        assert server["server_generation_tokens"] == metrics["total_output_tokens"]  # llama.cpp's own counter
    assert "bench verdict: PASS" in (run_dir / "summary.md").read_text()
    assert (run_dir / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    on_host = exec_in(served.host, "cat /var/lib/rigforge/bench/latest.json")
    assert json.loads(on_host.stdout) == result  # the raw JSON stays on the host too
    assert exec_in(served.host, f"test -f /var/lib/rigforge/bench/{run_dir.name}.json").returncode == 0


def test_the_bench_plans_no_change_and_the_switch_leaves_it_out(served: ServedHost) -> None:
    plan = assert_no_changes(served.inventory, "deploys/bench.py").plan
    assert SMOKE_OP in [op["name"] for op in plan]  # planned, but a plan never measures

    full = run_pyinfra(served.inventory, "deploys/full.py", dry=True).plan
    assert [op["hosts_with_change"] for op in full if op["name"] == SMOKE_OP] == [[]]
    returned = RETURN_OP.format(host=served.host.name)
    assert [op["name"] for op in full][-3:] == [SMOKE_OP, returned, RELEASE_NAME]  # the bench last, then the lock
    assert [op["hosts_with_change"] for op in full if op["name"] == returned] == [[]]  # no gateway took it out
    switched_off = run_pyinfra(served.inventory, "deploys/full.py", "--data", "bench=false", dry=True).plan
    assert not [op for op in switched_off if op["name"].startswith("Bench |")]


def test_full_deploy_ends_with_the_bench_and_passes_with_gemma(served: ServedHost) -> None:
    before, _ = latest_result(served)
    run = run_pyinfra(served.inventory, "deploys/full.py")

    assert f"bench PASS on {served.host.name}: 3/3 cells ok" in run.stderr
    # Last but the return to the rotation and the deploy lock's release.
    assert [op["name"] for op in run.data["results"]["operations"]][-3:] == [
        SMOKE_OP, RETURN_OP.format(host=served.host.name), RELEASE_NAME]
    after, result = latest_result(served)
    assert after != before and result["status"] == "ok"  # a new run, now the latest


def test_random_weights_fail_the_full_deploy_on_garbage(served: ServedHost) -> None:
    garbage = write_random_gguf(served.work / "garbage.gguf")
    inventory = served.sandbox.write_inventory(served.work / "inventory-garbage.py", [served.host], "sandbox",
                                               model_overrides(garbage))
    run = run_pyinfra(inventory, "deploys/full.py", check=False)  # its serving layer swaps the model in

    assert run.returncode != 0
    assert "C=1,in=128:garbage" in run.stderr
    assert f"bench FAIL on {served.host.name}: 0/1 cells ok" in run.stderr
    _, result = latest_result(served)
    assert result["status"] == "failed" and "C=1,in=128:garbage" in result["failed_checks"]
    assert result["metadata"]["model"] == "garbage.gguf"
    assert result["cells"][0]["metrics"] is None  # a failed cell is never a number


def test_a_looping_model_fails_the_deploy_on_repetition(served: ServedHost) -> None:
    run = serve_and_bench(served, write_loop_gguf(served.work / "loop.gguf"))

    assert run.returncode != 0
    # It answers the fixed prompts: only the repetition detector catches its completions. Its vocabulary has no
    # Gemma turn markers, so the profile's Gemma chat template is refused too (the chat path's own check).
    assert "probe probe_capital: ok" in run.stderr
    verdicts = [line for line in run.stderr.splitlines() if "bench FAIL on" in line or "probe " in line]
    assert (f"failed: chat_template, C=1,in=128:repetition, floor C=1 in=128; results in {served.results}"
            in run.stderr), verdicts
    _, result = latest_result(served)
    assert result["failed_checks"] == ["chat_template", "C=1,in=128:repetition"]
