"""Which Docker a rig has, and the table row saying what rigforge does with it (rigforge/checks/docker_install.py).

The ``DockerSetup`` parser runs on real captures (tests/fixtures/docker/README.md says where each came from);
the decisions are pure functions over dpkg's installed packages and the parsed facts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rigforge.checks.docker_install import DockerInstall, docker_install, docker_row, replacing_would_block
from rigforge.facts.docker import DockerEngine, DockerOwnerSetup, DockerSetup, EngineState, parse_owner_setup
from rigforge.facts.packages import InstalledPackage

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "docker"
NO_SETUP = DockerOwnerSetup(cli=None, cli_package=None, daemon_keys=(), containers=())
STOPPED = EngineState(cli="/usr/bin/docker", server_version=None, runtimes=(), systemd_unit="inactive")
RUNNING = EngineState(cli="/usr/bin/docker", server_version="28.5.1", runtimes=("runc",), systemd_unit="active")
NOTHING = EngineState(cli=None, server_version=None, runtimes=(), systemd_unit="inactive")
CE = {name: InstalledPackage(version, held=False) for name, version in (
    ("docker-ce", "5:28.5.1-1~debian.12~bookworm"), ("docker-ce-cli", "5:28.5.1-1~debian.12~bookworm"),
    ("containerd.io", "1.7.28-1~debian.12~bookworm"), ("curl", "7.88.1-10+deb12u14"))}


def _setup(name: str) -> DockerOwnerSetup:
    return DockerSetup().process((FIXTURES / f"fact-DockerSetup-{name}.txt").read_text().splitlines())


def _engine(name: str) -> EngineState:
    return DockerEngine().process((FIXTURES / f"fact-DockerEngine-{name}.txt").read_text().splitlines())


def test_unowned_cli_and_containers_with_and_without_gpus() -> None:
    setup = _setup("machine")
    assert setup.cli == "/usr/local/bin/docker" and setup.cli_package is None
    assert setup.daemon_keys == ()
    by_name = {c.name: c for c in setup.containers}
    assert set(by_name) == {"rfcap-run", "rfcap-gpu"}
    assert by_name["rfcap-run"].status == "running" and not by_name["rfcap-run"].uses_gpus
    assert by_name["rfcap-run"].started_at.startswith("2026-11-25T01:16:16")
    assert by_name["rfcap-gpu"].status == "created" and by_name["rfcap-gpu"].uses_gpus  # docker create --gpus all
    assert [c.name for c in setup.running] == ["rfcap-run"]


def test_owner_setup_sections() -> None:
    text = ("## cli\n/usr/bin/docker\n## owner\ndocker-ce-cli: /usr/bin/docker\n## daemon\n"
            '{"data-root": "/data/docker", "registry-mirrors": ["http://m:5000"], "runtimes": {}}\n\n## containers\n')
    setup = parse_owner_setup(text)
    assert setup.cli_package == "docker-ce-cli"
    assert setup.daemon_keys == ("data-root", "registry-mirrors", "runtimes")
    assert setup.containers == ()
    assert parse_owner_setup("## cli\n\n## owner\n## daemon\n{oops\n## containers\n").daemon_keys is None


@pytest.mark.parametrize(("installed", "setup", "kind"), [
    ({}, NO_SETUP, "none"),
    ({"docker.io": InstalledPackage("20.10.24+dfsg1-1+deb12u1", False)}, NO_SETUP, "docker.io"),
    (CE, NO_SETUP, "docker-ce"),
    ({"docker-ce-cli": CE["docker-ce-cli"]}, NO_SETUP, "docker-ce"),  # docker.io would remove the CLI too
    ({**CE, "docker.io": InstalledPackage("20.10.24+dfsg1-1+deb12u1", False)}, NO_SETUP, "docker-ce"),
    ({"podman-docker": InstalledPackage("4.3.1+ds1-8+deb12u1", False)}, NO_SETUP, "other"),
    ({}, "machine", "other"),  # a static docker under /usr/local/bin and no package
    ({"docker.io": InstalledPackage("20.10.24+dfsg1-1+deb12u1", False)}, "machine", "docker.io"),
])
def test_docker_kind(installed: dict, setup: DockerOwnerSetup | str, kind: str) -> None:
    owner = _setup(setup) if isinstance(setup, str) else setup
    assert docker_install(installed, owner).kind == kind


def test_docker_ce_row_never_installs_docker_io_and_never_blocks() -> None:
    install = docker_install(CE, NO_SETUP)
    assert install.package_names == ("docker-ce", "docker-ce-cli", "containerd.io")
    for engine in (STOPPED, RUNNING):
        row = docker_row(install, engine, _setup("machine"))
        assert not row.blocking and not replacing_would_block(install, engine)
        assert row.source == "Docker's repository (download.docker.com)"
        assert row.action.startswith("use it: never install docker.io")
        assert "Conflicts: docker-ce" in row.why
        assert "2 containers (1 running; using GPUs: rfcap-gpu)" in row.found
    assert "engine not running" in docker_row(install, STOPPED, NO_SETUP).found


def test_other_docker_blocks_only_when_no_engine_answers() -> None:
    install = docker_install({"podman-docker": InstalledPackage("4.3.1+ds1-8+deb12u1", False)}, NO_SETUP)
    row = docker_row(install, NOTHING, NO_SETUP)
    assert row.blocking and row.action.startswith("stop:") and "podman-docker 4.3.1" in row.found
    assert not docker_row(install, _engine("sock1"), NO_SETUP).blocking  # an engine answers: used as it is


def test_rows_for_docker_io_and_none() -> None:
    fresh = docker_row(docker_install({}, NO_SETUP), NOTHING, NO_SETUP)
    assert (fresh.found, fresh.action, fresh.blocking) == ("none", "install docker.io and NVIDIA's container toolkit",
                                                           False)
    ours = docker_row(DockerInstall("docker.io", (("docker.io", "20.10.24"),), "/usr/bin/docker", "docker.io"),
                      _engine("ctr1"), NO_SETUP)
    assert ours.source == "the distribution's packages" and "engine 20.10.24+dfsg1 running" in ours.found


def test_docker_ce_rig_captured_after_the_container_layer() -> None:
    from rigforge.facts.packages import DpkgPackages

    dpkg = DpkgPackages().process((FIXTURES / "fact-DpkgPackages-dce.txt").read_text().splitlines())
    setup, engine = _setup("dce"), _engine("dce")
    install = docker_install(dpkg, setup)
    assert install.kind == "docker-ce" and install.cli_package == "docker-ce-cli"
    assert dict(install.packages)["docker-ce"] == "5:28.5.1-1~debian.12~bookworm"
    assert engine.answers and not engine.external and "nvidia" in engine.runtimes
    assert setup.daemon_keys == ("data-root", "registry-mirrors", "runtimes")
    assert [(c.name, c.status) for c in setup.containers] == [("owner-stopped-2bee", "created"),
                                                              ("owner-run-2bee", "running")]
    row = docker_row(install, engine, setup)
    assert row.found.startswith("Docker CE (docker-ce 5:28.5.1-1~debian.12~bookworm, docker-ce-cli ")
    assert "2 containers (1 running); daemon.json keys: data-root, registry-mirrors" in row.found
