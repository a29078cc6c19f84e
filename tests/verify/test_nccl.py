"""What the nccl role promises: nccl.conf and the engine environment with the profile's values (strings),
and the NCCL graph XML only where the profile asks for it."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from rigforge.profile import Profile
from roles.nccl import ENGINE_ENV_FILE, NCCL_CONF, engine_environment, render_nccl_files


def test_files_are_the_profiles(host, profile: Profile) -> None:
    for path, content in render_nccl_files(profile).items():
        assert host.file(path).content_string == content, f"{path} differs from what the profile renders"


def test_engine_environment_lines(host, profile: Profile) -> None:
    env = host.file(ENGINE_ENV_FILE)
    assert (env.user, env.mode) == ("root", 0o640)
    lines = set(env.content_string.splitlines())
    missing = [f"{k}={v}" for k, v in engine_environment(profile).items() if f"{k}={v}" not in lines]
    assert not missing, f"{ENGINE_ENV_FILE} lacks {missing}"


def test_nccl_conf_and_graph(host, profile: Profile) -> None:
    if profile.nccl is None:
        assert not host.file(NCCL_CONF).exists
        return
    conf = host.file(NCCL_CONF).content_string
    graph = host.file(profile.nccl.graph_path)
    if profile.nccl.graph_xml:
        assert f"NCCL_GRAPH_FILE={profile.nccl.graph_path}" in conf
        assert ET.fromstring(graph.content_string).tag == "graphs"
    else:
        assert "NCCL_GRAPH_FILE" not in conf and not graph.exists
