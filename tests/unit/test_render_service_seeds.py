"""The three real profiles' launch commands, flag by flag, against the commands quoted in rig-facts.

The expected commands below are copied from ../shared/reference/rig-facts.md (§2.4 for 2x-pix, §3.3 A for
4x-threadripper, §4.4 for 8x-turin), not produced by the renderer. Where rigforge deliberately differs,
the difference is listed here with its reason; anything else that differs fails.
"""

from __future__ import annotations

import json
import shlex

import pytest

from rigforge.profile import Profile
from rigforge.profile.loader import load_profile
from rigforge.serving.api_key import CONTAINER_ENTRY, CONTAINER_KEY_FILE
from rigforge.serving.engines import launch_argv

SEEDS = {
    # rig-facts §2.4 (INFERRED there from the documented knobs + the 397B b12x recipe)
    "2x-pix": """docker run --gpus all --ipc=host --shm-size=8g --network=host --ulimit memlock=-1
        --ulimit stack=67108864 -v ~/.cache/huggingface:/root/.cache/huggingface -v jit-cache:/cache/jit
        -e SGLANG_ENABLE_SPEC_V2=True voipmonitor/sglang:cu130 python3 -m sglang.launch_server
        --model txn545/Qwen3.5-122B-A10B-NVFP4 --served-model-name Qwen3.5-122B --tensor-parallel-size 2
        --quantization modelopt_fp4 --kv-cache-dtype fp8_e4m3 --trust-remote-code
        --attention-backend flashinfer --fp4-gemm-backend b12x --moe-runner-backend b12x
        --speculative-algo NEXTN --speculative-num-steps 5 --speculative-eagle-topk 1
        --speculative-num-draft-tokens 6 --cuda-graph-max-bs 32 --max-running-requests 32
        --mem-fraction-static 0.85 --reasoning-parser qwen3 --tool-call-parser qwen3_coder --enable-metrics
        --host 0.0.0.0 --port 8000""",
    # rig-facts §3.3 A (W:models/qwen35-397b.md)
    "4x-threadripper": """docker run --gpus '"device=0,1,2,3"' --ipc=host --shm-size=8g --network=host
        --ulimit memlock=-1 --ulimit stack=67108864 -v ~/.cache/huggingface:/root/.cache/huggingface
        -v jit-cache:/cache/jit -e NCCL_P2P_LEVEL=SYS voipmonitor/vllm:cu130
        python3 -m vllm.entrypoints.openai.api_server
        --model lukealonso/Qwen3.5-397B-A17B-NVFP4 --served-model-name Qwen3.5 --tensor-parallel-size 4
        --trust-remote-code --gpu-memory-utilization 0.9 --max-num-batched-tokens 8192 --max-num-seqs 128
        --enable-prefix-caching --enable-chunked-prefill --enable-auto-tool-choice --tool-call-parser qwen3_coder
        --reasoning-parser qwen3 --host 0.0.0.0 --port 5000
        --speculative-config '{"method":"mtp","num_speculative_tokens":2}'""",
    # rig-facts §4.4 (W:models/glm5.md = BLD:profiles/glm5-nvfp4.sh)
    "8x-turin": """docker run --gpus all --ipc=host --shm-size=8g --network=host --ulimit memlock=-1
        --ulimit stack=67108864 -v ~/.cache/huggingface:/root/.cache/huggingface -v jit-cache:/cache/jit
        -e SGLANG_ENABLE_SPEC_V2=True -e SGLANG_ENABLE_JIT_DEEPGEMM=0 -e SGLANG_ENABLE_DEEP_GEMM=0
        -e NCCL_GRAPH_FILE=/etc/nccl_graph_opt.xml -e NCCL_IB_DISABLE=1 -e NCCL_P2P_LEVEL=SYS
        -e NCCL_ALLOC_P2P_NET_LL_BUFFERS=1 -e NCCL_MIN_NCHANNELS=8 -e OMP_NUM_THREADS=8 -e SAFETENSORS_FAST_GPU=1
        voipmonitor/sglang:cu130 python3 -m sglang.launch_server
        --model-path festr2/GLM-5-NVFP4-MTP --served-model-name glm-5 --reasoning-parser glm45
        --tool-call-parser glm47 --tensor-parallel-size 8 --quantization modelopt_fp4 --kv-cache-dtype bf16
        --trust-remote-code --cuda-graph-max-bs 32 --max-running-requests 64 --mem-fraction-static 0.85
        --chunked-prefill-size 16384 --host 0.0.0.0 --port 5000 --disable-custom-all-reduce --enable-metrics
        --sleep-on-idle --attention-backend flashinfer --fp4-gemm-backend b12x --moe-runner-backend b12x
        --model-loader-extra-config '{"enable_multithread_load": true, "num_threads": 16}'
        --speculative-algorithm NEXTN --speculative-num-steps 4 --speculative-num-draft-tokens 6
        --speculative-eagle-topk 1
        --json-model-override-args '{"index_topk_pattern": "FFSFSSSFSSFFFSSSFFFSFSSSSSSFFSFFSFFSSFFFFFFSFFFF\
FSFFSSSSSSFSFFFSFSSSFSFFSFFSSS"}'""",
}

#: The 2x seed abbreviates the flag (argparse accepts unambiguous prefixes); the GLM seed spells it out.
FLAG_ALIASES = {"--speculative-algo": "--speculative-algorithm"}
#: How each engine names its model; the seeds name a Hub repo, rigforge the folder the weights role filled.
MODEL_FLAGS = ("--model", "--model-path")
#: Docker flags rigforge adds on purpose: a named container it can stop and clean up, never an implicit
#: pull at start, the nccl role's env file, and the pre-downloaded weights (plus the graph XML) read-only.
ADDED_DOCKER_FLAGS = {"--rm", "--name", "--pull", "--env-file", "--mount"}
#: The engine's API key (the seeds serve 0.0.0.0 without one): the key file and the entry that hands it to the
#: engine's module are mounted read-only (``--mount``), and the module runs through the entry
#: (rigforge/serving/api_key.py).
KEY_ENTRY = [CONTAINER_ENTRY, "--api-key-file", CONTAINER_KEY_FILE]


def without_key_entry(program: list[str]) -> list[str]:
    """``python3 ENTRY --api-key-file FILE -m module …`` as the seeds run it: ``python3 -m module …``."""
    assert program[1:4] == KEY_ENTRY, f"the engine does not start through the key's entry: {program[:4]}"
    return [program[0], *program[4:]]


def split_docker(argv: list[str], image_prefixes: tuple[str, ...]) -> tuple[list[str], str, list[str]]:
    """(docker flags, image, engine program + flags) of a ``docker run`` argv."""
    start = argv.index("run") + 1
    image_at = next(i for i in range(start, len(argv)) if argv[i].startswith(image_prefixes))
    return argv[start:image_at], argv[image_at], argv[image_at + 1:]


def pairs(words: list[str]) -> list[tuple[str, str | None]]:
    """``--flag value`` / ``--flag=value`` / bare ``--flag`` words as (flag, value) pairs, in order."""
    result: list[tuple[str, str | None]] = []
    i = 0
    while i < len(words):
        flag, eq, value = words[i].partition("=")
        if eq:
            result.append((flag, value))
            i += 1
        elif i + 1 < len(words) and not words[i + 1].startswith("-"):
            result.append((flag, words[i + 1]))
            i += 2
        else:
            result.append((flag, None))
            i += 1
    return result


def comparable(value: str | None) -> object:
    """JSON values compare as data (the seeds put spaces after colons, rigforge writes compact JSON)."""
    if value and value.startswith("{"):
        return json.loads(value)
    return value


def engine_flags(words: list[str]) -> dict[str, object]:
    program_end = next(i for i, word in enumerate(words) if word.startswith("--"))
    return {FLAG_ALIASES.get(flag, flag): comparable(value) for flag, value in pairs(words[program_end:])}


def expected_environment(profile: Profile, docker_flags: list[tuple[str, str | None]]) -> dict[str, str]:
    """Variables the engine container gets: ``-e`` flags, plus what the nccl role writes to the env file."""
    env = dict((value or "").split("=", 1) for flag, value in docker_flags if flag == "-e")
    if profile.nccl is not None:
        env.update(profile.nccl.env)
        if profile.nccl.graph_xml:
            env["NCCL_GRAPH_FILE"] = profile.nccl.graph_path
    return env


@pytest.mark.parametrize("profile_name", sorted(SEEDS))
def test_engine_flags_match_the_seed_command(profile_name: str) -> None:
    profile = load_profile(profile_name)
    _, _, seed_engine = split_docker(shlex.split(SEEDS[profile_name]), ("voipmonitor/",))
    _, _, ours_engine = split_docker(launch_argv(profile), ("rigforge/", "voipmonitor/"))
    ours_engine = without_key_entry(ours_engine)
    assert ours_engine[: ours_engine.index(next(w for w in ours_engine if w.startswith("--")))] == \
        seed_engine[: seed_engine.index(next(w for w in seed_engine if w.startswith("--")))]  # the program
    seed, ours = engine_flags(seed_engine), engine_flags(ours_engine)
    seed_model = [seed.pop(flag) for flag in MODEL_FLAGS if flag in seed]
    ours_model = [ours.pop(flag) for flag in MODEL_FLAGS if flag in ours]
    assert seed_model == [profile.model.repo_id], "the seed's repo is the one the weights role downloads"
    assert ours_model == [profile.model.path], "the engine reads the weights role's folder"
    assert ours == seed


@pytest.mark.parametrize("profile_name", sorted(SEEDS))
def test_docker_flags_match_the_seed_command(profile_name: str) -> None:
    profile = load_profile(profile_name)
    seed_docker, _, _ = split_docker(shlex.split(SEEDS[profile_name]), ("voipmonitor/",))
    ours_docker, _, _ = split_docker(launch_argv(profile), ("rigforge/", "voipmonitor/"))
    seed, ours = pairs(seed_docker), pairs(ours_docker)

    def plain(flag_pairs: list[tuple[str, str | None]]) -> set[tuple[str, str | None]]:
        return {(f, v) for f, v in flag_pairs if f not in ("-v", "-e", "--gpus") and f not in ADDED_DOCKER_FLAGS}

    assert plain(ours) == plain(seed)  # --ipc, --shm-size, --network, both --ulimit
    seed_gpus = dict(seed)["--gpus"]
    # A seed naming every GPU of its rig (4x: device=0,1,2,3) is the same set as "all" on that rig.
    assert dict(ours)["--gpus"] == seed_gpus or seed_gpus == '"device=' + ",".join(
        str(i) for i in range(profile.gpus.count)) + '"'  # type: ignore[union-attr]
    # Volumes: same container paths; the host side is rigforge's (a fixed cache folder, its own named volume).
    seed_targets = {value.split(":")[1] for flag, value in seed if flag == "-v" and value}
    ours_volumes = [value for flag, value in ours if flag == "-v" and value]
    ours_targets = {volume.split(":")[1] for volume in ours_volumes}
    assert seed_targets <= ours_targets
    extra = ours_targets - seed_targets
    expected_extra = {profile.model.path} | ({profile.nccl.graph_path} if profile.nccl and profile.nccl.graph_xml
                                             else set())
    assert extra == expected_extra
    assert all(volume.endswith(":ro") for volume in ours_volumes if volume.split(":")[1] in expected_extra)
    # Environment: every seed variable reaches the container with the same value (-e or the env file).
    seed_env = dict((value or "").split("=", 1) for flag, value in seed if flag == "-e")
    ours_env = expected_environment(profile, ours)
    assert {key: ours_env.get(key) for key in seed_env} == seed_env
