"""What ``engine.auth`` promises on a rig whose engine needs its API key (rigforge/serving/api_key.py): the key only in
its root-only file, in no command line, environment or unit file, and a request without it or with a wrong
one refused (401) while one with it is served.

Every command reads the key on the rig itself (``grep -f``, ``sed | curl -H @-``): it never passes through a
command line, this test's output or this machine.
"""

from __future__ import annotations

import json
import secrets

import pytest

from rigforge.bench_runs.plan import bench_base_url
from rigforge.profile import Profile
from rigforge.serving.api_key import KEY_FILE, SECRETS_DIR, bearer_header_command, needs_api_key
from rigforge.serving.engines import ENGINE_ENV_FILE
from roles.service import UNIT_PATH

COMPLETION = {"prompt": "Q: What is the capital of France?\nA:", "max_tokens": 2, "temperature": 0}


@pytest.fixture(autouse=True)
def needs_key(profile: Profile) -> None:
    if not needs_api_key(profile):
        pytest.skip(f"{profile.name}: the engine listens on {profile.engine.host} with engine.auth "
                    f"{profile.engine.auth.mode}: no API key")


def status(host, url: str, header: str, body: dict | None = None) -> str:
    """The HTTP status of one request, with ``header`` (a shell command printing header lines) piped into curl."""
    data = f"-H 'Content-Type: application/json' -d '{json.dumps(body)}' " if body else ""
    return host.check_output(f"{header} | curl -sS -o /dev/null -w '%{{http_code}}' --max-time 60 -H @- {data}{url}")


def test_the_key_file_is_root_only(host) -> None:
    key, folder = host.file(KEY_FILE), host.file(SECRETS_DIR)
    assert key.exists and key.size > 0, f"{KEY_FILE} is missing or empty"
    assert (key.user, key.group, key.mode) == ("root", "root", 0o600)
    assert (folder.user, folder.mode) == ("root", 0o700)


def test_no_key_or_a_wrong_key_is_refused_and_the_key_is_served(host, profile: Profile) -> None:
    wrong = f"printf 'Authorization: Bearer %s\\n' {secrets.token_hex(16)}"
    completion = {**COMPLETION, "model": profile.engine.served_model_name}
    for path, body in (("/v1/models", None), ("/v1/completions", completion)):
        url = bench_base_url(profile) + path
        assert status(host, url, ":", body) == "401", f"{path} without a key"
        assert status(host, url, wrong, body) == "401", f"{path} with a wrong key"
        assert status(host, url, bearer_header_command(), body) == "200", f"{path} with the rig's key"


def test_the_key_is_in_no_command_line_environment_or_unit_file(host) -> None:
    # grep reads the key from its file (-f): the pattern is in no command line either.
    found = host.run(f"grep -lsF -f {KEY_FILE} /proc/[0-9]*/cmdline /proc/[0-9]*/environ "
                     f"{UNIT_PATH} {UNIT_PATH}.d/* {ENGINE_ENV_FILE}").stdout.split()
    assert not found, f"the API key is in: {', '.join(found)}"
