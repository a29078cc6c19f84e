"""What the container and images roles promise: a Docker engine that answers, the nvidia runtime loaded,
and the engine image the profile names present, with the JIT cache volume belonging to it."""

from __future__ import annotations

import json

import pytest

from rigforge.facts.docker import configured_runtimes
from rigforge.images import build_plan, image_ref
from rigforge.operations.docker import JIT_OWNER_FILE
from rigforge.profile import Profile


@pytest.fixture()
def container_profile(profile: Profile) -> Profile:
    if profile.container is None:
        pytest.skip(f"profile {profile.name} runs no containers")
    return profile


def _docker_json(host, template: str) -> object:
    return json.loads(host.check_output(f"docker info --format '{{{{json .{template}}}}}'"))


def test_docker_engine_answers(host, container_profile: Profile) -> None:
    assert host.exists("docker"), "the docker CLI is missing"
    assert host.run("docker info --format '{{.ServerVersion}}'").rc == 0, "no Docker engine answers"


def test_docker_runs_under_systemd(host, container_profile: Profile) -> None:
    if not host.service("docker.service").is_running and host.file("/var/run/docker.sock").is_socket:
        pytest.skip("the Docker engine on /var/run/docker.sock runs outside this host (container role docs)")
    assert host.service("docker.service").is_enabled


def test_nvidia_runtime_configured_and_loaded(host, container_profile: Profile) -> None:
    assert container_profile.container is not None
    if not container_profile.container.nvidia_toolkit:
        pytest.skip("the profile does not ask for NVIDIA's container toolkit")
    assert host.package("nvidia-container-toolkit").is_installed
    daemon_json = host.file("/etc/docker/daemon.json")
    assert daemon_json.exists and "nvidia" in (configured_runtimes(daemon_json.content_string) or ())
    assert "nvidia" in _docker_json(host, "Runtimes"), "daemon.json names nvidia but the engine has not loaded it"


def test_engine_image_present(host, container_profile: Profile) -> None:
    if container_profile.engine.native is not None:
        pytest.skip("the engine runs natively")
    ref = image_ref(container_profile)
    assert host.run(f"docker image inspect {ref}").rc == 0, f"image {ref} is missing"
    plan = build_plan(container_profile)
    if plan is not None:
        assert host.file(plan.log_path).exists, f"the build log {plan.log_path} is missing"
        assert host.file(f"{plan.context_dir}/Dockerfile").content_string == plan.dockerfile


def test_jit_cache_volume_belongs_to_the_image(host, container_profile: Profile) -> None:
    docker = container_profile.engine.docker
    if docker is None or docker.jit_cache_volume is None:
        pytest.skip("no JIT cache volume in the profile")
    ref = image_ref(container_profile)
    image_id = host.check_output(f"docker image inspect --format '{{{{.Id}}}}' {ref}")
    owner = host.run(f"docker run --rm --pull never --network none --entrypoint cat "
                     f"-v {docker.jit_cache_volume}:/cache {ref} /cache/{JIT_OWNER_FILE}")
    assert owner.rc == 0 and owner.stdout.strip() == image_id, "JIT caches may come from another image"
