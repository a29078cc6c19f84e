"""The engine's API key in the profile and in what rigforge renders (rigforge/serving/api_key.py,
rigforge/profile/access.py).

The three GPU profiles serve on 0.0.0.0, so their engines need the key: their rendered units and env files
must hand it to the engine through the root-only key file, never through argv (``ps`` shows it to every user)
or an environment; ``engine.auth: none`` without a reason stops before pyinfra connects.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rigforge.bench_runs.plan import bench_config
from rigforge.profile.loader import ProfileError, load_profile
from rigforge.remote import llama_launcher
from rigforge.serving.api_key import (
    CONTAINER_ENTRY,
    CONTAINER_KEY_FILE,
    CONTROLLER_VARIABLE,
    KEY_FILE,
    bearer_header_command,
    needs_api_key,
)
from rigforge.serving.engines import LAUNCHER_PATH, REMOTE_LIB_DIR, EngineConfigError, launch_argv, launch_command
from roles.nccl import ENGINE_ENV_FILE, render_nccl_files
from roles.service import render_unit

ROOT = Path(__file__).resolve().parents[2]
GPU_PROFILES = ["2x-pix", "4x-threadripper", "8x-turin"]
SENTINEL = "sentinel-key-that-must-not-be-rendered-0123456789"


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_gpu_profiles_serve_beyond_loopback_with_a_key(name: str) -> None:
    profile = load_profile(name)
    assert profile.engine.host == "0.0.0.0" and profile.engine.auth.mode == "auto"
    assert needs_api_key(profile)


def test_the_sandbox_on_loopback_needs_no_key_and_beyond_it_does() -> None:
    assert not needs_api_key(load_profile("sandbox"))
    assert needs_api_key(load_profile("sandbox", {"engine": {"host": "0.0.0.0"}}))
    assert needs_api_key(load_profile("sandbox", {"engine": {"auth": {"mode": "key"}}}))
    assert not needs_api_key(load_profile("sandbox", {"engine": {"host": "127.0.0.2"}}))
    none = {"engine": {"host": "0.0.0.0", "auth": {"mode": "none", "reason": "behind the site's TLS proxy"}}}
    assert not needs_api_key(load_profile("sandbox", none))


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_the_key_reaches_each_gpu_engine_through_its_file_never_argv_or_environment(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CONTROLLER_VARIABLE, SENTINEL)  # rendering never reads the key, given or not
    profile = load_profile(name)
    argv = launch_argv(profile)
    unit, env_file = render_unit(profile), render_nccl_files(profile)[ENGINE_ENV_FILE]
    image_at = next(index for index, word in enumerate(argv) if word.startswith("rigforge/"))
    docker, program = argv[:image_at], argv[image_at + 1:]
    # The key file and its reader come in read-only; the engine's module runs through the reader.
    mounts = [docker[index + 1] for index, word in enumerate(docker) if word == "--mount"]
    assert mounts == [f"type=bind,source={KEY_FILE},target={CONTAINER_KEY_FILE},readonly",
                      f"type=bind,source={REMOTE_LIB_DIR}/engine_entry.py,target={CONTAINER_ENTRY},readonly"]
    assert program[:6] == ["python3", CONTAINER_ENTRY, "--api-key-file", CONTAINER_KEY_FILE, "-m",
                           profile.engine.command[2]]
    # Nothing else carries it: no --api-key word, no variable, no env file of the secrets folder.
    assert "--api-key" not in argv
    assert not [word for word in argv if "API_KEY" in word]
    assert [word for word in argv if "/etc/rigforge/secrets" in word] == [mounts[0]]
    assert argv[argv.index("--env-file") + 1] == "/etc/rigforge/engine.env"
    for text in (unit, env_file):
        assert SENTINEL not in text and "API_KEY" not in text
    assert [line for line in unit.splitlines() if line.startswith("EnvironmentFile=")] == \
        ["EnvironmentFile=-/etc/rigforge/engine.env"]
    assert not [line for line in unit.splitlines() if line.startswith("Environment=")]


def test_the_native_engine_beyond_loopback_reads_its_key_file() -> None:
    argv = launch_argv(load_profile("sandbox", {"engine": {"host": "0.0.0.0"}}))
    assert argv[:2] == ["/opt/rigforge/llama-venv/bin/python", LAUNCHER_PATH]
    assert argv[-2:] == ["--api-key-file", KEY_FILE]
    assert llama_launcher.parse_args(argv[2:]).api_key_file == KEY_FILE
    assert "--api-key-file" not in launch_argv(load_profile("sandbox"))


def test_the_launcher_gives_the_server_the_key_from_the_file(tmp_path: Path) -> None:
    xllamacpp = pytest.importorskip("xllamacpp")
    key_file = tmp_path / "key"
    key_file.write_text(SENTINEL + "\n")
    words = ["--model", "m.gguf", "--alias", "a", "--port", "9", "--threads", "1", "--parallel", "1",
             "--ctx-size", "512", "--api-key-file", str(key_file)]
    assert llama_launcher.build_params(llama_launcher.parse_args(words), xllamacpp).api_keys == [SENTINEL]
    key_file.write_text("\n")
    with pytest.raises(SystemExit, match=f"the API key file {key_file} is empty"):
        llama_launcher.build_params(llama_launcher.parse_args(words), xllamacpp)


def test_a_keyed_container_engine_must_run_a_python_module() -> None:
    profile = load_profile("2x-pix", {"engine": {"command": ["sglang", "serve"]}})
    with pytest.raises(EngineConfigError, match=r"must be \[python, -m, module\]"):
        launch_command(profile)


def test_the_bench_reads_the_key_on_the_rig() -> None:
    assert bench_config(load_profile("2x-pix"), {})["api_key_file"] == KEY_FILE
    assert bench_config(load_profile("sandbox"), {})["api_key_file"] is None


def test_clients_pipe_the_key_into_curl(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(SENTINEL + "\n")
    header = subprocess.run(["sh", "-c", bearer_header_command(str(key_file))], capture_output=True, text=True)
    assert header.stdout == f"Authorization: Bearer {SENTINEL}\n"
    assert SENTINEL not in bearer_header_command(str(key_file))


@pytest.mark.parametrize(("auth", "message"), [
    ({"mode": "none"}, "engine.auth.mode: none serves the engine without an API key: set engine.auth.reason too"),
    ({"mode": "none", "reason": " "}, "engine.auth.mode: none serves the engine without an API key"),
    ({"mode": "key", "reason": "x"}, "engine.auth.mode: engine.auth.reason is only read with mode none, not key"),
    ({"mode": "open"}, "engine.auth.mode: Input should be 'auto', 'key' or 'none'"),
])
def test_a_bad_auth_names_its_file_and_field(tmp_path: Path, auth: dict, message: str) -> None:
    for name in ("base", "gpu-rig", "2x-pix"):
        (tmp_path / f"{name}.yaml").write_text((ROOT / "inventory" / "profiles" / f"{name}.yaml").read_text())
    (tmp_path / "proxied.yaml").write_text(f"extends: 2x-pix\nengine:\n  auth: {auth}\n")
    with pytest.raises(ProfileError) as caught:
        load_profile("proxied", profiles_dir=tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / 'proxied.yaml'}: {message}"), caught.value


def test_the_key_is_no_engine_flag() -> None:
    with pytest.raises(ProfileError, match=r"engine\.flags\.--api-key: invalid name: --api-key must not be"):
        load_profile("2x-pix", {"engine": {"flags": {"--api-key": "k"}}})


def test_auth_none_without_a_reason_stops_pyinfra_before_connecting(tmp_path: Path) -> None:
    inventory = tmp_path / "inv.py"
    # 192.0.2.0/24 is TEST-NET-1: never routed, so reaching "Connecting" would show in the output.
    inventory.write_text("from rigforge.inventory import rig_host\n"
                         "rigs = [rig_host('a', profile='4x-threadripper', ssh_hostname='192.0.2.1',"
                         " profile_overrides={'engine': {'auth': {'mode': 'none'}}})]\n")
    result = subprocess.run([sys.executable, "-m", "pyinfra", str(inventory), "deploys/full.py", "--dry"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output and "Connecting" not in output
    assert ("rigforge: inventory host 'a' profile_overrides: engine.auth.mode: none serves the engine without an "
            "API key: set engine.auth.reason too") in result.stderr
