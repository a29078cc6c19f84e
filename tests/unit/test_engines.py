"""Launch commands: how each engine is given its model, name and address, the docker flags, and quoting."""

from __future__ import annotations

import re

import pytest

from rigforge.profile.loader import ProfileError, load_profile
from rigforge.remote import llama_launcher
from rigforge.serving.engines import (
    CONTAINER_NAME,
    ENGINE_ENV_FILE,
    LAUNCHER_PATH,
    LLAMA_VENV,
    EngineConfigError,
    environment_lines,
    exec_start_lines,
    flag_lines,
    health_url,
    image_ref,
    launch_argv,
    launch_command,
    systemd_quote,
)

GGUF = "/srv/models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf"


def test_sandbox_runs_the_launcher_from_the_engine_venv() -> None:
    argv = launch_argv(load_profile("sandbox"))
    assert argv[:2] == [f"{LLAMA_VENV}/bin/python", LAUNCHER_PATH]
    assert argv[2:] == ["--model", GGUF, "--alias", "gemma-3-270m", "--host", "127.0.0.1", "--port", "8080",
                        "--threads", "2", "--parallel", "4", "--ctx-size", "8192", "--metrics",
                        "--chat-template", "gemma", "--no-jinja"]


def test_launcher_accepts_every_word_the_unit_gives_it() -> None:
    profile = load_profile("sandbox", {"engine": {"flags": {"--batch-size": 256, "--metrics": True}}})
    args = llama_launcher.parse_args(launch_argv(profile)[2:])
    assert (args.model, args.alias, args.port, args.parallel, args.ctx_size) == (GGUF, "gemma-3-270m", 8080, 4, 8192)
    assert args.batch_size == 256 and args.metrics


def test_launcher_maps_flags_onto_the_real_server_parameters() -> None:
    xllamacpp = pytest.importorskip("xllamacpp")
    args = llama_launcher.parse_args(["--model", "m.gguf", "--alias", "a", "--port", "9", "--threads", "3",
                                      "--parallel", "2", "--ctx-size", "4096", "--batch-size", "128",
                                      "--threads-batch", "1", "--no-warmup"])
    params = llama_launcher.build_params(args, xllamacpp)
    assert params.model.path == "m.gguf" and params.model_alias == {"a"} and params.hostnames == ["127.0.0.1"]
    assert (params.port, params.n_parallel, params.n_ctx, params.n_batch) == (9, 2, 4096, 128)
    assert (params.cpuparams.n_threads, params.cpuparams_batch.n_threads) == (3, 1)
    assert params.warmup is False


def test_launcher_serves_a_built_in_chat_template_with_jinja_off() -> None:
    xllamacpp = pytest.importorskip("xllamacpp")
    args = llama_launcher.parse_args(launch_argv(load_profile("sandbox"))[2:])
    params = llama_launcher.build_params(args, xllamacpp)
    assert (params.chat_template, params.use_jinja) == ("gemma", False)
    plain = llama_launcher.parse_args(["--model", "m", "--alias", "a", "--port", "9", "--threads", "1",
                                       "--parallel", "1", "--ctx-size", "512"])
    assert llama_launcher.build_params(plain, xllamacpp).use_jinja is True  # llama.cpp's default stays


def test_a_built_in_template_name_without_no_jinja_is_refused() -> None:
    profile = load_profile("sandbox", {"engine": {"flags": {"--no-jinja": False}}})
    with pytest.raises(EngineConfigError, match="--chat-template 'gemma' names a llama.cpp built-in template"):
        launch_command(profile)
    jinja = "{% for m in messages %}<start_of_turn>{{ m.content }}<end_of_turn>{% endfor %}"
    own = load_profile("sandbox", {"engine": {"flags": {"--no-jinja": False, "--chat-template": jinja}}})
    assert launch_argv(own)[-2:] == ["--chat-template", jinja]


def test_native_engine_refuses_flags_the_launcher_does_not_know() -> None:
    profile = load_profile("sandbox", {"engine": {"flags": {"--mlock": True}}})
    with pytest.raises(EngineConfigError, match="--mlock"):
        launch_command(profile)


def test_flags_true_is_bare_false_is_left_out_mappings_are_json() -> None:
    assert flag_lines({"--a": True, "--b": False, "--c": 0.85, "--d": {"method": "mtp", "n": 2}, "--e": "x"}) == [
        ["--a"], ["--c", "0.85"], ["--d", '{"method":"mtp","n":2}'], ["--e", "x"]]


@pytest.mark.parametrize("profile_name, model_flag", [("2x-pix", "--model-path"), ("4x-threadripper", "--model"),
                                                      ("8x-turin", "--model-path")])
def test_container_engines_get_the_local_weights_read_only(profile_name: str, model_flag: str) -> None:
    profile = load_profile(profile_name)
    argv = launch_argv(profile)
    path = profile.model.path
    assert argv[argv.index(model_flag) + 1] == path
    assert f"{path}:{path}:ro" in argv
    assert argv[argv.index("--env-file") + 1] == ENGINE_ENV_FILE
    assert argv[argv.index("--name") + 1] == CONTAINER_NAME
    assert argv[argv.index("--pull") + 1] == "never"  # a missing image is an error, never a surprise pull


def test_engine_flags_may_not_override_what_the_profile_says_elsewhere() -> None:
    """Refused when the profile loads: the engine would get --port twice."""
    with pytest.raises(ProfileError, match="engine.flags must not set --port: rigforge gives --port itself"):
        load_profile("4x-threadripper", {"engine": {"flags": {"--port": 1}}})


def test_device_list_for_gpus_is_passed_as_docker_expects() -> None:
    profile = load_profile("4x-threadripper", {"engine": {"docker": {"gpus": "device=0,1,2,3"}}})
    argv = launch_argv(profile)
    assert argv[argv.index("--gpus") + 1] == '"device=0,1,2,3"'
    assert '--gpus "\\"device=0,1,2,3\\""' in exec_start_lines(launch_command(profile))


def test_graph_xml_is_mounted_only_when_the_profile_uses_it() -> None:
    turin, pix = load_profile("8x-turin"), load_profile("2x-pix")
    assert "/etc/nccl_graph_opt.xml:/etc/nccl_graph_opt.xml:ro" in launch_argv(turin)
    assert not any("nccl_graph" in word for word in launch_argv(pix))


def test_image_comes_from_the_profile_or_its_content_hashed_build() -> None:
    assert image_ref(load_profile("sandbox")) is None
    published = load_profile("8x-turin", {"engine": {"build": None, "image": "voipmonitor/sglang:cu130"}})
    assert image_ref(published) == "voipmonitor/sglang:cu130"
    built = image_ref(load_profile("2x-pix"))
    assert built is not None and re.fullmatch(r"rigforge/sglang:[0-9a-f]{16}", built)
    changed = load_profile("2x-pix", {"engine": {"build": {"args": {"MAX_JOBS": "8"}}}})
    assert image_ref(changed) != built


def test_health_is_asked_on_loopback_when_the_server_binds_everywhere() -> None:
    assert health_url(load_profile("2x-pix")) == "http://127.0.0.1:8000/health"
    assert health_url(load_profile("sandbox")) == "http://127.0.0.1:8080/health"


@pytest.mark.parametrize("word, quoted", [
    ("--port", "--port"),
    ("/srv/models/x:/srv/models/x:ro", "/srv/models/x:/srv/models/x:ro"),
    ("a b", '"a b"'),
    ('{"method":"mtp"}', '"{\\"method\\":\\"mtp\\"}"'),
    ("50%", '"50%%"'),
    ("$HOME", '"$$HOME"'),
    ("back\\slash", '"back\\\\slash"'),
    (";", '";"'),
    ("", '""'),
])
def test_systemd_quoting(word: str, quoted: str) -> None:
    assert systemd_quote(word) == quoted


def test_environment_lines_escape_percent_and_quotes() -> None:
    assert environment_lines({"A": "x y", "B": "50%", "C": 'say "hi"'}) == [
        '"A=x y"', '"B=50%%"', '"C=say \\"hi\\""']
