# ruff: noqa: E501  (the command lines below are quoted as published, line breaks included)
"""Each recipe taken from a published command line, against that command line, argument by argument.

The commands below are quoted as their sources published them (shared/reference/published-recipes.md and
rig-facts.md, which transcribe the posts); rigforge renders its unit for the recipe, and every item that differs
must be declared in the recipe's ``differences`` with its reason (or be rigforge's own frame,
rigforge/recipes/published.FRAME). A declaration with nothing behind it fails too: differences stay exact.
"""

from __future__ import annotations

import pytest

from rigforge.profile.loader import load_profile
from rigforge.recipes.published import FRAME, differences, published_launch, rendered_launch

# published-recipes.md A — the K64 post's command, as posted.
K64_PUBLISHED = r"""
docker pull verdictai/vllm-blackwell-k64:latest
docker run -d --name vllm --gpus all --ipc host --shm-size 32g -p 9200:8000 \
  -v /path/to/sehyo-qwen35-nvfp4:/model:ro \
  -e NCCL_P2P_DISABLE=1 -e VLLM_WORKER_MULTIPROC_METHOD=spawn \
  verdictai/vllm-blackwell-k64:latest \
  python3 -m vllm.entrypoints.openai.api_server \
  --model /model --served-model-name qwen3.5-397b-nvfp4 --host 0.0.0.0 --port 8000 --trust-remote-code \
  --tensor-parallel-size 4 --gpu-memory-utilization 0.85 --max-model-len 262144 --enable-prefix-caching \
  --reasoning-parser qwen3 --enable-auto-tool-choice --tool-call-parser qwen3_coder \
  --speculative-config '{"method":"mtp","num_speculative_tokens":5}'
"""

# rig-facts §3.3 B — K64:configs/docker_run_tp4_tuned.sh: rig-facts quotes its env, its docker flags, its image and
# its arguments; they are put together here as one docker run (the command is the image's server, as in A).
K64_TUNED = r"""
docker run --gpus all --ipc host --shm-size 32g --restart on-failure:3 -p 9200:8000 \
  -e VLLM_LOG_STATS_INTERVAL=1 -e SAFETENSORS_FAST_GPU=1 -e OMP_NUM_THREADS=6 -e CUDA_DEVICE_ORDER=PCI_BUS_ID \
  -e CUDA_DEVICE_MAX_CONNECTIONS=32 -e PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
  -e VLLM_WORKER_MULTIPROC_METHOD=spawn -e VLLM_SLEEP_WHEN_IDLE=1 -e VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 \
  verdictai/vllm-blackwell-k64:latest python3 -m vllm.entrypoints.openai.api_server \
  --model /model --served-model-name qwen3.5-397b-nvfp4 --host 0.0.0.0 --port 8000 --trust-remote-code --tensor-parallel-size 4
  --gpu-memory-utilization 0.90 --max-num-batched-tokens 16384 --max-num-seqs 128 --max-model-len 262144 --enable-prefix-caching
  --reasoning-parser qwen3 --enable-auto-tool-choice --tool-call-parser qwen3_coder --mm-encoder-tp-mode data --mm-processor-cache-type shm
  --speculative-config '{"method":"mtp","num_speculative_tokens":3}'
"""

# published-recipes.md B — the HONEST post's command, as posted.
MARLIN = r"""
export VLLM_MOE_FORCE_MARLIN=1
vllm serve nvidia/Qwen3.5-397B-A17B-NVFP4 --tensor-parallel-size 4 --max-model-len 262144 \
  --gpu-memory-utilization 0.95 --enable-chunked-prefill --enable-prefix-caching \
  --kv-cache-dtype fp8_e4m3 --calculate-kv-scales
"""

# rig-facts §3.3 A — the wiki's command (W:models/qwen35-397b.md).
WIKI = r"""
docker run --gpus '"device=0,1,2,3"' --ipc=host --shm-size=8g --network=host --ulimit memlock=-1 --ulimit stack=67108864 \
  -v ~/.cache/huggingface:/root/.cache/huggingface -v jit-cache:/cache/jit -e NCCL_P2P_LEVEL=SYS \
  voipmonitor/vllm:cu130 python3 -m vllm.entrypoints.openai.api_server \
  --model lukealonso/Qwen3.5-397B-A17B-NVFP4 --served-model-name Qwen3.5 --tensor-parallel-size 4 --trust-remote-code \
  --gpu-memory-utilization 0.9 --max-num-batched-tokens 8192 --max-num-seqs 128 --enable-prefix-caching --enable-chunked-prefill \
  --enable-auto-tool-choice --tool-call-parser qwen3_coder --reasoning-parser qwen3 --host 0.0.0.0 --port 5000 \
  --speculative-config '{"method":"mtp","num_speculative_tokens":2}'
"""

# rig-facts §2.4 — the 2x PIX command rig-facts assembles from the post's documented knobs (the exact one is not
# published: rig-facts §10); the closest there is to a quoted command for the 198 tok/s recipe.
B12X_NEXTN = r"""
docker run --gpus all --ipc=host --shm-size=8g --network=host --ulimit memlock=-1 --ulimit stack=67108864 \
  -v ~/.cache/huggingface:/root/.cache/huggingface -v jit-cache:/cache/jit -e SGLANG_ENABLE_SPEC_V2=True \
  voipmonitor/sglang:cu130 python3 -m sglang.launch_server \
  --model txn545/Qwen3.5-122B-A10B-NVFP4 --served-model-name Qwen3.5-122B --tensor-parallel-size 2 \
  --quantization modelopt_fp4 --kv-cache-dtype fp8_e4m3 --trust-remote-code \
  --attention-backend flashinfer --fp4-gemm-backend b12x --moe-runner-backend b12x \
  --speculative-algo NEXTN --speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens 6 \
  --cuda-graph-max-bs 32 --max-running-requests 32 --mem-fraction-static 0.85 \
  --reasoning-parser qwen3 --tool-call-parser qwen3_coder --enable-metrics --host 0.0.0.0 --port 8000
"""

# rig-facts §4.4 — the recommended GLM-5 command (W:models/glm5.md = BLD:profiles/glm5-nvfp4.sh).
GLM5 = r"""
docker run --gpus all --ipc=host --shm-size=8g --network=host --ulimit memlock=-1 --ulimit stack=67108864 \
  -v ~/.cache/huggingface:/root/.cache/huggingface -v jit-cache:/cache/jit \
  -e SGLANG_ENABLE_SPEC_V2=True -e SGLANG_ENABLE_JIT_DEEPGEMM=0 -e SGLANG_ENABLE_DEEP_GEMM=0 \
  -e NCCL_GRAPH_FILE=/etc/nccl_graph_opt.xml -e NCCL_IB_DISABLE=1 -e NCCL_P2P_LEVEL=SYS \
  -e NCCL_ALLOC_P2P_NET_LL_BUFFERS=1 -e NCCL_MIN_NCHANNELS=8 -e OMP_NUM_THREADS=8 -e SAFETENSORS_FAST_GPU=1 \
  voipmonitor/sglang:cu130 python3 -m sglang.launch_server \
  --model-path festr2/GLM-5-NVFP4-MTP --served-model-name glm-5 --reasoning-parser glm45 --tool-call-parser glm47 \
  --tensor-parallel-size 8 --quantization modelopt_fp4 --kv-cache-dtype bf16 --trust-remote-code \
  --cuda-graph-max-bs 32 --max-running-requests 64 --mem-fraction-static 0.85 --chunked-prefill-size 16384 \
  --host 0.0.0.0 --port 5000 --disable-custom-all-reduce --enable-metrics --sleep-on-idle \
  --attention-backend flashinfer --fp4-gemm-backend b12x --moe-runner-backend b12x \
  --model-loader-extra-config '{"enable_multithread_load": true, "num_threads": 16}' \
  --speculative-algorithm NEXTN --speculative-num-steps 4 --speculative-num-draft-tokens 6 --speculative-eagle-topk 1 \
  --json-model-override-args '{"index_topk_pattern": "FFSFSSSFSSFFFSSSFFFSFSSSSSSFFSFFSFFSSFFFFFFSFFFFFSFFSSSSSSFSFFFSFSSSFSFFSFFSSS"}'
"""

# rig-facts §4.4: "For 4+ concurrent users switch to --fp4-gemm-backend cutlass --moe-runner-backend cutlass".
GLM5_CUTLASS = GLM5

PUBLISHED = [
    ("4x-threadripper", "wiki", WIKI),
    ("4x-threadripper", "k64-published", K64_PUBLISHED),
    ("4x-threadripper", "k64-tuned", K64_TUNED),
    ("4x-threadripper", "marlin", MARLIN),
    # The post's table row "Marlin TP=2 + PP=2": its one command, with the row's parallelism declared as differences.
    ("4x-threadripper", "marlin-tp2-pp2", MARLIN),
    # The K64 post's notes, "MTP=3 for multi-user": its command, with that one change declared.
    ("4x-threadripper", "k64-mtp3", K64_PUBLISHED),
    ("2x-pix", "b12x-nextn", B12X_NEXTN),
    ("8x-turin", "glm5-b12x", GLM5),
    ("8x-turin", "glm5-cutlass", GLM5_CUTLASS),
]


@pytest.mark.parametrize(("profile_name", "recipe", "command"), PUBLISHED, ids=[f"{p}:{r}" for p, r, _ in PUBLISHED])
def test_recipe_renders_its_published_command(profile_name: str, recipe: str, command: str) -> None:
    profile = load_profile(profile_name)
    declared = profile.engine.recipes[recipe].differences
    found = differences(published_launch(command), rendered_launch(profile.with_recipe(recipe)))
    undeclared = {key: values for key, values in found.items() if key not in declared and key not in FRAME}
    assert not undeclared, f"{profile_name}:{recipe} differs from its published command in items no one declared " \
                           "(published, rendered): " + "; ".join(f"{k}: {v}" for k, v in undeclared.items())
    stale = sorted(set(declared) - set(found))
    assert not stale, f"{profile_name}:{recipe} declares differences its rendering does not have: {stale}"


def test_a_changed_flag_is_caught() -> None:
    """The comparison would see a recipe drifting from its source: one flag's value changed."""
    profile = load_profile("4x-threadripper", {"engine": {"recipes": {"wiki": {"flags": {"--max-num-seqs": 64}}}}})
    found = differences(published_launch(WIKI), rendered_launch(profile.with_recipe("wiki")))
    assert found["--max-num-seqs"] == ("128", "64")


def test_the_parser_reads_what_the_posts_write() -> None:
    launch = published_launch(K64_PUBLISHED)
    assert launch.image == "verdictai/vllm-blackwell-k64:latest"
    assert launch.docker is not None and launch.docker["-v /model"] == "/path/to/sehyo-qwen35-nvfp4"
    assert launch.env == {"NCCL_P2P_DISABLE": "1", "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    assert launch.flags["--speculative-config"] == '{"method":"mtp","num_speculative_tokens":5}'
    assert launch.flags["--enable-prefix-caching"] == ""
    marlin = published_launch(MARLIN)
    assert marlin.docker is None and marlin.command == ("vllm", "serve")
    assert marlin.flags["--model"] == "nvidia/Qwen3.5-397B-A17B-NVFP4"
    assert marlin.env == {"VLLM_MOE_FORCE_MARLIN": "1"}
