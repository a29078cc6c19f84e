"""What the nccl role promises: nccl.conf and the engine environment with the profile's values (strings),
the NCCL graph XML only where the profile asks for it, and its NCCL_GRAPH_FILE in the engine's environment
alone: every NCCL program on the rig reads /etc/nccl.conf, and NCCL fails any communicator that lacks one of
the graph's GPUs (tests/fixtures/nccl/)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from rigforge.profile import Profile
from rigforge.profile.nccl_layout import GRAPH_VARIABLE, engine_graph_file, graph_devices
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


def test_the_graph_file_reaches_the_engine_alone(host, profile: Profile) -> None:
    graph = engine_graph_file(profile)
    names = [line.split("=", 1)[0] for line in host.file(ENGINE_ENV_FILE).content_string.splitlines()]
    assert (GRAPH_VARIABLE in names) == (graph is not None), f"{ENGINE_ENV_FILE}: {GRAPH_VARIABLE} expected: {graph}"
    conf = host.file(NCCL_CONF)
    if conf.exists:
        assert f"{GRAPH_VARIABLE}=" not in conf.content_string, (
            f"{NCCL_CONF} names {GRAPH_VARIABLE}: every NCCL program on the rig would load the graph and fail on "
            "fewer GPUs than it names; deploys/host.py removes the line")


def test_nccl_conf_and_graph(host, profile: Profile) -> None:
    if profile.nccl is None:
        assert not host.file(NCCL_CONF).exists
        return
    graph = host.file(profile.nccl.graph_path)
    if profile.nccl.graph_xml:
        devices = {int(gpu.get("dev"), 0) for gpu in ET.fromstring(graph.content_string).iter("gpu")}
        assert tuple(sorted(devices)) == graph_devices()
    else:
        assert not graph.exists
