"""What the service role promises: the engine unit as the profile renders it, enabled, running with its
current inputs, answering its health endpoint, serving the profile's model name, and answering a chat client
through the model's own chat template."""

from __future__ import annotations

import json

from rigforge.bench import chat
from rigforge.bench.client import build_payload
from rigforge.bench.config import CellKind, config_from_dict
from rigforge.bench.stream import build_record
from rigforge.bench.transport import RawStream
from rigforge.bench_runs.plan import bench_config, reasoning_parser
from rigforge.facts.images import ImageRecord
from rigforge.facts.service import EngineService, parse_service_state
from rigforge.profile import Profile
from rigforge.serving.api_key import bearer_header_command, needs_api_key
from rigforge.serving.engines import UNIT_NAME, health_url, image_commits
from roles.service import DROPIN_PATH, UNIT_PATH, render_unit


def test_unit_is_the_profiles(host, profile: Profile, image_record: ImageRecord | None) -> None:
    unit = host.file(UNIT_PATH)
    # A built image is named by the commits its git refs resolved to, as the rig records them.
    with image_commits(image_record.commits if image_record else {}):
        rendered = render_unit(profile)
    assert unit.content_string == rendered, f"{UNIT_PATH} differs from what the profile renders"
    assert (unit.user, unit.mode) == ("root", 0o644)


def test_service_enabled_running_with_its_current_inputs(host) -> None:
    state = parse_service_state(host.check_output(EngineService().command(UNIT_NAME)))
    assert state.enabled and state.running, f"{UNIT_NAME}: {state.active_state} ({state.sub_state})"
    dropin = host.file(DROPIN_PATH).content_string
    wanted = next(line.split("=", 2)[2] for line in dropin.splitlines() if line.startswith("Environment="))
    assert state.running_inputs == wanted, "the engine runs with other inputs than its drop-in names"
    assert not state.needs_daemon_reload


def test_health_and_served_model(host, profile: Profile) -> None:
    assert host.run(f"curl -fsS -o /dev/null --max-time 10 {health_url(profile)}").rc == 0
    models_url = health_url(profile).removesuffix("/health") + "/v1/models"
    # With a key, it goes from the rig's key file through a pipe: never on a command line (rigforge/serving/api_key.py).
    key = f"{bearer_header_command()} | " if needs_api_key(profile) else ": | "
    models = json.loads(host.check_output(f"{key}curl -fsS --max-time 10 -H @- {models_url}"))
    assert profile.engine.served_model_name in [model["id"] for model in models["data"]]


def test_one_chat_request_is_answered_through_the_models_template(host, profile: Profile) -> None:
    """One streamed chat request, as a chat client sends it, judged as the bench's chat probe judges it: usage,
    streaming, no chat-template token in the answer (and the answer itself for a chat-tuned model)."""
    config = config_from_dict(bench_config(profile, metadata={}))
    thinking = False if reasoning_parser(profile) else None
    probe = chat.CHAT_PROBES[0]
    payload = build_payload(config, CellKind("chat", thinking), probe.question,
                            chat.max_tokens(config.chat_probes, thinking), fixed_length=False)
    url = health_url(profile).removesuffix("/health") + "/v1/chat/completions"
    key = f"{bearer_header_command()} | " if needs_api_key(profile) else ": | "
    run = host.run(f"{key}curl -fsSN --max-time 300 -H 'Content-Type: application/json' -H @- -d %s %s",
                   json.dumps(payload), url)
    assert run.rc == 0, run.stderr
    lines = [(0.0, line.strip()) for line in run.stdout.splitlines() if line.strip()]
    verdict = chat.judge_chat(probe, thinking, build_record(RawStream(0.0, 200, lines), 0.0), config.chat_probes,
                              config.reasoning_parser)
    assert verdict.passed, verdict.detail
