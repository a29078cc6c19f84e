"""Docker facts parsed from real captures (tests/fixtures/docker/README.md says where each came from)."""

from __future__ import annotations

from pathlib import Path

from rigforge.facts.docker import DockerEngine, configured_runtimes, parse_engine_state

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "docker"


def _engine(name: str):
    return DockerEngine().process((FIXTURES / f"fact-DockerEngine-{name}.txt").read_text().splitlines())


def test_engine_run_by_the_hosts_systemd_with_the_nvidia_runtime_loaded() -> None:
    engine = _engine("ctr1")
    assert engine.cli == "/usr/bin/docker"
    assert engine.server_version == "20.10.24+dfsg1"
    assert engine.answers and not engine.external
    assert "nvidia" in engine.runtimes and "runc" in engine.runtimes
    assert engine.systemd_unit == "active"


def test_engine_reached_through_a_mounted_socket_is_external() -> None:
    engine = _engine("sock1")
    assert engine.answers and engine.external
    assert engine.systemd_unit == "inactive"
    assert "nvidia" not in engine.runtimes


def test_host_without_docker() -> None:
    engine = _engine("nodock")
    assert engine.cli is None and not engine.answers and not engine.external
    assert engine.runtimes == ()


def test_an_answer_that_is_not_json_counts_as_no_engine() -> None:
    engine = parse_engine_state(["cli=/usr/bin/docker", "info=<html>proxy error</html>", "systemd=failed"])
    assert not engine.answers and engine.systemd_unit == "failed"


def test_configured_runtimes_from_daemon_json() -> None:
    text = (FIXTURES / "daemon.json-after-nvidia-ctk.txt").read_text()
    assert configured_runtimes(text) == ("nvidia",)
    assert configured_runtimes("") == ()
    assert configured_runtimes('{"log-driver": "journald"}') == ()
    assert configured_runtimes('{"runtimes": {"nvidia": {}, "crun": {}}}') == ("crun", "nvidia")
    assert configured_runtimes("{not json") is None


def test_toolkit_repo_url_for_the_host() -> None:
    from pyinfra.facts.server import LinuxDistribution

    from roles.container import distro_name, repo_url

    # os-release captured on the lent GPU machine (Ubuntu 24.04), through pyinfra's own fact parser.
    os_release = (FIXTURES.parent / "gpu" / "nvidia-h100-x1" / "os-release.txt").read_text().splitlines()
    ubuntu = LinuxDistribution().process(["/etc/os-release", *os_release, "---"])
    assert distro_name(ubuntu) == "ubuntu2404"
    assert distro_name({"name": "Debian", "major": 12, "release_meta": {"ID": "debian", "VERSION_ID": "12"}}) == \
        "debian12"
    assert repo_url("https://nvidia.github.io/libnvidia-container/stable/deb/{arch}/", "amd64", "ubuntu2404") == \
        "https://nvidia.github.io/libnvidia-container/stable/deb/amd64/"
