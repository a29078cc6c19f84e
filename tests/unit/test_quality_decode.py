"""Decode measured on every engine: vLLM's and SGLang's logprobs of generated tokens read (their answer formats from
their own sources and a quoted public response, tests/fixtures/quality/README.md), the greedy pass with re-sync
asking each engine in its own API, and the prefill record beside it on the engines that have prompt logprobs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rigforge.bench import quality as bench_quality
from rigforge.bench.config import config_from_dict
from rigforge.bench.logprob_formats import FormatError, sglang_generated_steps, vllm_generated_steps
from rigforge.bench.quality import METHODS, PREFILL, greedy_steps, run_quality
from rigforge.profile.loader import load_profile
from rigforge.quality.reference import quality_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "quality"


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def test_vllm_generated_tokens_are_read_by_id_with_their_top_k() -> None:
    steps = vllm_generated_steps(fixture("vllm_generated_logprobs.json")["response"], top_k=3)
    assert [step.token for step in steps] == [12095, 13, 1084]  # " Paris", ".", " It"
    assert steps[0].top == [[12095, -0.73046875], [2130, -2.734375], [32671, -3.046875]]
    assert [step.token_logprob for step in steps] == [-0.73046875, -0.9765625, -1.3984375]
    assert vllm_generated_steps(fixture("vllm_generated_logprobs.json")["response"], top_k=2)[2].top == [
        [1084, -1.3984375], [576, -2.21875]]  # k + 1 listed (vLLM adds the chosen token): cut to k, best first


def test_vllm_tokens_written_as_text_are_refused_naming_the_switch() -> None:
    answer = fixture("vllm_generated_logprobs.json")["response"]
    answer["choices"][0]["logprobs"]["tokens"][0] = " Paris"  # return_tokens_as_token_ids not sent
    with pytest.raises(FormatError, match="return_tokens_as_token_ids"):
        vllm_generated_steps(answer, 3)
    with pytest.raises(FormatError, match="was logprobs sent"):
        vllm_generated_steps({"choices": [{"text": "x", "logprobs": None}]}, 3)


def test_sglang_output_logprobs_give_each_generated_token_and_its_top_k() -> None:
    steps = sglang_generated_steps(fixture("sglang_output_logprobs.json")["response"], top_k=3)
    assert [step.token for step in steps] == [12095, 13, 1084]
    assert steps[1].top == [[13, -0.9765625], [58883, -1.7265625], [11, -2.53125]]
    assert steps[2].token_logprob == -1.3984375 and steps[2].text is None  # return_text_in_logprobs off
    meta = fixture("sglang_input_logprobs.json")["response"]["meta_info"]  # a quoted answer without output top-k
    with pytest.raises(FormatError, match="top_logprobs_num"):
        sglang_generated_steps({"meta_info": meta}, 3)


def test_both_engines_answers_of_one_generation_read_the_same() -> None:
    vllm = vllm_generated_steps(fixture("vllm_generated_logprobs.json")["response"], 3)
    sglang = sglang_generated_steps(fixture("sglang_output_logprobs.json")["response"], 3)
    assert [(step.token, step.top) for step in vllm] == [(step.token, step.top) for step in sglang]


class Engine:
    """Answers the pass's requests as one engine would (the fixtures' answers, each token offered greedily), and
    keeps every request: a stand-in for vLLM or SGLang, which do not run on this machine."""

    def __init__(self, engine: str) -> None:
        self.engine, self.requests = engine, []

    def __call__(self, root_url: str, path: str, payload: dict[str, Any], timeout_s: float) -> Any:
        self.requests.append((path, payload))
        if path == "/tokenize":
            return {"tokens": [1, 2, 3]}
        if "prompt_logprobs" in payload:
            return {"choices": [{"prompt_logprobs": [None, {"2": {"logprob": -1.0, "rank": 1}},
                                                      {"3": {"logprob": -0.5, "rank": 1}}]}]}
        if path == "/generate" and payload.get("logprob_start_len") == 0:
            return {"meta_info": {"input_token_logprobs": [[None, 1, None], [-1.0, 2, None], [-0.5, 3, None]],
                                  "input_top_logprobs": [None, [[-1.0, 2, None]], [[-0.5, 3, None]]]}}
        name = "sglang_output_logprobs.json" if self.engine == "sglang" else "vllm_generated_logprobs.json"
        answer = fixture(name)["response"]
        count = payload.get("max_tokens") or payload["sampling_params"]["max_new_tokens"]
        if self.engine == "sglang":
            meta = answer["meta_info"]
            meta["output_token_logprobs"], meta["output_top_logprobs"] = (meta["output_token_logprobs"][:count],
                                                                          meta["output_top_logprobs"][:count])
        else:
            logprobs = answer["choices"][0]["logprobs"]
            for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
                logprobs[key] = logprobs[key][:count]
        return answer


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_pass_on_vllm_and_sglang_measures_decode_with_resync_and_prefill_beside_it(
        engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert METHODS[engine] == "greedy"
    stand_in = Engine(engine)
    monkeypatch.setattr(bench_quality, "_post", stand_in)
    block = quality_config(load_profile("sandbox").bench.quality, engine, None)
    assert block is not None
    block = {**block, "max_tokens": 3, "texts": block["texts"][:1], "task_score": None,
             "reference_tokens": {block["texts"][0]["id"]: [12095, 99, 1084]}}  # the candidate leaves it at 1
    config = config_from_dict({"base_url": "http://127.0.0.1:1", "model": "m", "quality": block})
    result = run_quality(config)
    assert result is not None
    prefill, decode = result["texts"]
    assert (prefill["id"], prefill["phase"]) == (block["texts"][0]["id"] + PREFILL, "prefill")
    assert [step["token"] for step in prefill["steps"]] == [2, 3] and prefill["error"] is None
    assert decode["phase"] == "decode" and decode["error"] is None and decode["prompt_ids"] == [1, 2, 3]
    # 13 where the reference has 99: re-synced there; from the reference's path the stand-in says 12095 again
    assert [step["token"] for step in decode["steps"]] == [12095, 13, 12095] and decode["resyncs"] == [1, 2]
    asked = [payload for path, payload in stand_in.requests if "prompt_logprobs" not in payload and
             payload.get("logprob_start_len") != 0 and path != "/tokenize"]
    if engine == "vllm":
        assert all(payload["return_tokens_as_token_ids"] and payload["logprobs"] == block["top_k"] and
                   payload["ignore_eos"] for payload in asked)
        assert [payload["prompt"] for payload in asked] == [[1, 2, 3], [1, 2, 3, 12095, 99]]
    else:
        assert all(payload["return_logprob"] and payload["top_logprobs_num"] == block["top_k"] and
                   payload["sampling_params"]["ignore_eos"] for payload in asked)
        assert [payload["input_ids"] for payload in asked] == [[1, 2, 3], [1, 2, 3, 12095, 99]]


def test_the_greedy_pass_is_the_engines_only_method_now() -> None:
    assert set(METHODS.values()) == {"greedy"}
    steps, resyncs, _ = greedy_steps(lambda ids, n: [bench_quality.Step(7)] * n, [1], None, 3, 0)
    assert [step.token for step in steps] == [7, 7, 7] and resyncs == []
