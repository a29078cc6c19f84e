"""The bench role's plan: config per profile, metadata, the uploaded client, paths, links and the report."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from rigforge.bench.config import config_from_dict
from rigforge.bench_runs.plan import (
    EXIT_MARKER,
    REMOTE_PACKAGE_DIR,
    HostRunPaths,
    RigVersions,
    bench_config,
    client_command,
    controller_run_paths,
    host_run_paths,
    latest_link_command,
    library_files,
    parse_exit_status,
    results_root,
    run_metadata,
    run_stamp,
)
from rigforge.profile.loader import load_profile
from rigforge.serving.engines import REMOTE_LIB_DIR, image_ref
from roles.bench import outcome_line, render_library_file, write_reports
from tests.bench_support.captured import capture_text

REPO_ROOT = Path(__file__).resolve().parents[2]
RIG_PROFILES = ("sandbox", "2x-pix", "4x-threadripper", "8x-turin")
GPU_VERSIONS = RigVersions(
    driver_version="595.45.04",
    cuda_driver_version="13.2",
    gpus=("NVIDIA RTX PRO 6000 Blackwell Server Edition",) * 2,
    image=image_ref(load_profile("2x-pix")),  # as the bench role reads it: the content-hashed tag it built
    image_id="sha256:" + "ab" * 32,
    image_git_refs={"SGLANG_REF": {"repository": "https://github.com/voipmonitor/sglang.git", "ref": "blackwell-cu130",
                                   "commit": "cd" * 20}},
    weights_revision="0123456789abcdef0123456789abcdef01234567",
    weights_origin="txn545/Qwen3.5-122B-A10B-NVFP4",
    weights_sha256={f"model-{index:05d}-of-00030.safetensors": "00" * 32 for index in range(1, 31)},
)


@pytest.fixture
def result() -> dict[str, Any]:
    """A real result: python3.9 -m rigforge.bench against Gemma 270M on xllamacpp (see captures/README.md)."""
    return json.loads(capture_text("result_gemma_sandbox.json"))


@pytest.mark.parametrize("name", RIG_PROFILES)
def test_every_rig_profile_gives_a_config_the_client_accepts(name: str) -> None:
    profile = load_profile(name)
    config = bench_config(profile, run_metadata(profile, "rig-a", GPU_VERSIONS))

    assert config_from_dict(config).as_dict() == config  # what travels is what the client validates
    assert config["base_url"] == f"http://127.0.0.1:{profile.engine.port}"  # loopback: no network in the numbers
    assert config["model"] == profile.engine.served_model_name
    assert config["endpoint"] == "completions"
    assert (config["concurrency"], config["input_tokens"]) == (profile.bench.concurrency, profile.bench.input_tokens)
    assert config["output_tokens"] == profile.bench.output_tokens
    assert (config["cell_seconds"], config["warmup_requests"]) == (profile.bench.cell_seconds,
                                                                    profile.bench.warmup_requests)
    assert json.loads(json.dumps(config)) == config
    assert config["metadata"]["profile"] == name and config["metadata"]["host"] == "rig-a"


@pytest.mark.parametrize(("name", "probes", "reasoning"), [("sandbox", "path", False), ("2x-pix", "answer", True),
                                                          ("4x-threadripper", "answer", True),
                                                          ("8x-turin", "answer", True)])
def test_chat_probes_judge_answers_of_chat_tuned_models_and_thinking_follows_the_parser(
        name: str, probes: str, reasoning: bool) -> None:
    profile = load_profile(name)
    config = bench_config(profile, run_metadata(profile, "rig-a", GPU_VERSIONS))
    assert (config["chat_probes"], config["reasoning_parser"], config["extra_cells"]) == (probes, reasoning, [])


def test_extra_cells_travel_to_the_client_as_their_own_grids() -> None:
    cells = [{"endpoint": "chat", "thinking": True, "concurrency": [1], "input_tokens": [128]},
             {"endpoint": "chat", "thinking": False, "concurrency": [1, 8], "input_tokens": [128]}]
    profile = load_profile("4x-threadripper", {"bench": {"extra_cells": cells}})
    config = config_from_dict(bench_config(profile, run_metadata(profile, "rig4x-a", GPU_VERSIONS)))
    grids = [(kind.label, levels, lengths) for kind, levels, lengths in config.cell_grids()]
    assert grids == [("completions", [1, 2, 4, 8, 16], [128, 4096]), ("chat, thinking on", [1], [128]),
                     ("chat, thinking off", [1, 8], [128])]


def test_metadata_of_a_gpu_rig_carries_driver_cuda_image_and_revision() -> None:
    profile = load_profile("2x-pix")
    metadata = run_metadata(profile, "rig2x-a", GPU_VERSIONS)

    assert metadata["gpus"] == "2x NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert (metadata["driver_version"], metadata["cuda_driver_version"]) == ("595.45.04", "13.2")
    assert metadata["cuda_toolkit"] == "13.2"
    assert metadata["engine"] == "sglang"
    assert metadata["image"] == image_ref(profile)  # the content-hashed tag the images role builds
    assert metadata["image_id"] == GPU_VERSIONS.image_id
    assert metadata["image_git_refs"] == GPU_VERSIONS.image_git_refs  # the commits the image was built from
    assert metadata["model"] == "txn545/Qwen3.5-122B-A10B-NVFP4"
    assert metadata["model_revision"] == GPU_VERSIONS.weights_revision  # what was fetched, not the branch asked for
    assert "model_sha256" not in metadata  # the revision names a checkout; 30 shard hashes would drown the table
    assert len(metadata["profile_hash"]) >= 12


def test_metadata_of_the_sandbox_names_the_package_and_file_hashes() -> None:
    profile = load_profile("sandbox")
    sha = profile.model.files[0].sha256
    versions = RigVersions(weights_sha256={"gemma-3-270m-q4_k_m.gguf": sha})
    metadata = run_metadata(profile, "sandbox-1", versions)

    assert metadata["engine"] == "llama.cpp"
    assert metadata["engine_package"] == profile.engine.native.package
    assert "image" not in metadata
    assert (metadata["gpus"], metadata["driver_version"], metadata["cuda_toolkit"]) == ("none", None, None)
    assert metadata["model"] == "gemma-3-270m-q4_k_m.gguf"
    assert metadata["model_sha256"] == {"gemma-3-270m-q4_k_m.gguf": sha}


def test_library_files_are_the_whole_client_and_nothing_else() -> None:
    files = library_files()
    expected = {f"{REMOTE_PACKAGE_DIR}/__init__.py"}
    expected |= {f"{REMOTE_PACKAGE_DIR}/bench/{path.name}" for path in (REPO_ROOT / "rigforge" / "bench").glob("*.py")}

    assert set(files) == expected
    assert files[f"{REMOTE_PACKAGE_DIR}/bench/config.py"] == (REPO_ROOT / "rigforge/bench/config.py").read_text()


def install_client(root: Path) -> Path:
    """Write the client exactly as the role installs it, under ``root`` instead of ``/``; returns the lib dir."""
    profile = load_profile("sandbox")
    for remote_path, source in library_files().items():
        local = root / remote_path.lstrip("/")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(render_library_file(profile, remote_path, source))
    return root / REMOTE_LIB_DIR.lstrip("/")


def test_installed_client_runs_and_fails_by_name_without_a_server(tmp_path: Path) -> None:
    lib_dir = install_client(tmp_path / "rig")
    assert (lib_dir / "rigforge/bench/runner.py").read_text().startswith("# managed by rigforge, profile sandbox")
    profile = load_profile("sandbox", {"engine": {"port": 9}, "bench": {"concurrency": [1], "cell_seconds": 0.2}})
    config = bench_config(profile, run_metadata(profile, "rig-a", RigVersions()))
    (tmp_path / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out.json"

    # The rig's own interpreter, isolated from this checkout: only the installed files can be imported.
    completed = subprocess.run(
        ["/usr/bin/python3", "-E", "-s", "-m", "rigforge.bench", "--config", str(tmp_path / "config.json"),
         "--out", str(out)],
        cwd=lib_dir, capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert completed.returncode == 2, completed.stderr  # checks failed, result still written
    result = json.loads(out.read_text())
    assert result["status"] == "failed" and result["metadata"]["host"] == "rig-a"
    assert any(name.endswith("request_error") or name.startswith("probe") for name in result["failed_checks"])
    assert all(cell["metrics"] is None for cell in result["cells"])  # a failed cell never becomes numbers


def test_client_command_quotes_paths_and_reports_the_exit_status() -> None:
    paths = host_run_paths("20261122T031455Z")
    command = client_command(paths)

    assert command.startswith(f"cd / && PYTHONPATH={REMOTE_LIB_DIR} ")
    assert f"--config {paths.config} --out {paths.result} --syslog; status=$?; " in command
    assert command.endswith(f"; echo {EXIT_MARKER}$status")
    assert parse_exit_status(["cell ...", "bench FAILED (...)", f"{EXIT_MARKER}2"]) == 2
    assert parse_exit_status([f"{EXIT_MARKER}0", "later noise"]) == 0
    assert parse_exit_status(["Traceback ...", "python3: No module named rigforge"]) is None


def test_client_command_runs_in_a_real_shell(tmp_path: Path) -> None:
    # The same text through sh, with a stand-in python3 on PATH that exits as a failed run would.
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "python3").write_text("#!/bin/sh\necho \"args: $*\" >&2\nexit 2\n")
    (fake_bin / "python3").chmod(0o755)
    completed = subprocess.run(["sh", "-c", client_command(host_run_paths("s1"))], capture_output=True, text=True,
                               env={"PATH": f"{fake_bin}:/usr/bin:/bin"})

    assert parse_exit_status(completed.stdout.splitlines()) == 2
    assert "-m rigforge.bench --config /var/lib/rigforge/bench/s1.config.json" in completed.stderr


def test_latest_link_moves_to_each_new_run(tmp_path: Path) -> None:
    for stamp in ("20261122T010000Z", "20261122T020000Z"):
        paths = HostRunPaths(config="", result=str(tmp_path / f"{stamp}.json"), latest=str(tmp_path / "latest.json"))
        Path(paths.result).write_text(json.dumps({"stamp": stamp}))
        subprocess.run(["sh", "-c", latest_link_command(paths)], check=True)

        latest = tmp_path / "latest.json"
        assert latest.is_symlink() and str(latest.readlink()) == f"{stamp}.json"  # relative: survives a move
        assert json.loads(latest.read_text()) == {"stamp": stamp}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["20261122T010000Z.json", "20261122T020000Z.json",
                                                                 "latest.json"]


def test_run_names_and_controller_paths_are_predictable() -> None:
    stamp = run_stamp(datetime(2026, 11, 22, 3, 14, 55, tzinfo=timezone.utc))
    local = controller_run_paths(Path("results"), "rig2x-a", stamp)

    assert stamp == "20261122T031455Z"
    assert host_run_paths(stamp).result == "/var/lib/rigforge/bench/20261122T031455Z.json"
    assert local.result == Path("results/rig2x-a/20261122T031455Z/result.json")
    assert (local.summary.name, local.plot.name) == ("summary.md", "plot.png")
    assert local.latest_link == Path("results/rig2x-a/latest")
    assert results_root({}) == Path("results")
    assert results_root({"RIGFORGE_RESULTS_DIR": "/srv/bench"}) == Path("/srv/bench")


def test_reports_from_a_real_result(result: dict[str, Any], tmp_path: Path) -> None:
    from rigforge.bench_runs.report import judge

    profile = load_profile("sandbox", {"bench": {"input_tokens": [48], "concurrency": [1, 2],
                                                 "primary": {"input_tokens": 48},  # a measured cell
                                                 "floors": [{"concurrency": 1, "input_tokens": 48,
                                                             "min_output_tps": 1, "min_decode_tps_per_user": 1}]}})
    for stamp in ("20261122T010000Z", "20261122T020000Z"):
        local = controller_run_paths(tmp_path, "sandbox-1", stamp)
        local.run_dir.mkdir(parents=True)
        write_reports(result, judge(result, profile.bench.floors), local)

        summary = local.summary.read_text()
        assert "| C | in | out | status |" in summary and "| 1 | 48 | 16 | ok |" in summary
        assert "PASS floor C=1 in=48" in summary and "bench verdict: PASS" in summary
        assert local.plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert str(local.latest_link.readlink()) == stamp
        assert (local.latest_link / "summary.md").read_text() == summary


def test_outcome_line_names_failed_checks_and_floors(result: dict[str, Any]) -> None:
    from rigforge.bench_runs.report import Floor, judge

    result["failed_checks"] = ["probe_capital", "C=1,in=48:garbage"]
    verdict = judge(result, [Floor(concurrency=2, input_tokens=48, min_output_tps=1000.0)])
    line = outcome_line("rig-a", result, verdict, False, Path("results/rig-a/s1"))

    assert line.startswith("bench FAIL on rig-a: 4/4 cells ok")
    assert "failed: probe_capital, C=1,in=48:garbage, floor C=2 in=48" in line
    assert line.endswith("results in results/rig-a/s1")
    assert outcome_line("rig-a", {"cells": []}, judge({"cells": []}, []), False, Path("r")).startswith(
        "bench FAIL on rig-a: 0/0 cells ok")
