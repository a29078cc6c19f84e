"""What the container and images roles promise: a Docker engine that answers, the nvidia runtime loaded,
the engine image the profile names present (a built one as the rig's record names it: its tag, the commits in its
labels and its contents file), the engine running that image, and the JIT cache volume belonging to it."""

from __future__ import annotations

import json

import pytest

from rigforge.facts.docker import configured_runtimes
from rigforge.facts.images import ImageRecord
from rigforge.images.plans import build_plan, image_ref
from rigforge.operations.docker import JIT_OWNER_FILE
from rigforge.profile import Profile
from rigforge.serving.engines import CONTAINER_NAME


@pytest.fixture()
def container_profile(profile: Profile) -> Profile:
    if profile.container is None:
        pytest.skip(f"profile {profile.name} runs no containers")
    return profile


@pytest.fixture()
def engine_image(container_profile: Profile, image_record: ImageRecord | None) -> str:
    """The image the engine must run: a built one at the commits the rig's record names."""
    if container_profile.engine.native is not None:
        pytest.skip("the engine runs natively")
    if container_profile.engine.build is not None and image_record is None:
        plan = build_plan(container_profile)
        assert plan is not None
        pytest.fail(f"{plan.record_path} is missing: the rig does not record what its image was built from")
    return image_ref(container_profile, image_record.commits if image_record else None)


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


def test_engine_image_present(host, container_profile: Profile, engine_image: str,
                              image_record: ImageRecord | None) -> None:
    assert host.run(f"docker image inspect {engine_image}").rc == 0, f"image {engine_image} is missing"
    if image_record is None:
        return
    plan = build_plan(container_profile, image_record.commits)
    assert plan is not None and image_record.tag == plan.tag, f"the rig's record names {image_record.tag}"
    labels = json.loads(host.check_output(f"docker image inspect --format '{{{{json .Config.Labels}}}}' {plan.tag}"))
    assert {arg: labels.get(f"org.rigforge.commit.{arg}") for arg in plan.commits} == plan.commits
    assert labels.get("org.rigforge.build-hash") == plan.content_hash
    contents = host.file(plan.contents_path)
    assert contents.exists, f"the image's contents file {plan.contents_path} is missing"
    checkouts = json.loads(contents.content_string)["checkouts"]
    assert {arg: entry["commit"] for arg, entry in checkouts.items()} == plan.commits
    assert host.file(f"{plan.context_dir}/Dockerfile").content_string == plan.dockerfile


def test_engine_runs_the_recorded_image(host, engine_image: str) -> None:
    running = host.run(f"docker inspect --format '{{{{.Image}}}}' {CONTAINER_NAME}")
    if running.rc != 0:
        pytest.skip(f"no {CONTAINER_NAME} container (the engine is not served on this rig)")
    wanted = host.check_output(f"docker image inspect --format '{{{{.Id}}}}' {engine_image}")
    assert running.stdout.strip() == wanted, f"{CONTAINER_NAME} runs {running.stdout.strip()}, not {engine_image}"


def test_jit_cache_volume_belongs_to_the_image(host, container_profile: Profile, engine_image: str) -> None:
    docker = container_profile.engine.docker
    if docker is None or docker.jit_cache_volume is None:
        pytest.skip("no JIT cache volume in the profile")
    ref = engine_image
    image_id = host.check_output(f"docker image inspect --format '{{{{.Id}}}}' {ref}")
    owner = host.run(f"docker run --rm --pull never --network none --entrypoint cat "
                     f"-v {docker.jit_cache_volume}:/cache {ref} /cache/{JIT_OWNER_FILE}")
    assert owner.rc == 0 and owner.stdout.strip() == image_id, "JIT caches may come from another image"
