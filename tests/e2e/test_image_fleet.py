"""One engine image per fleet, built from a moving git ref resolved and recorded: two sandbox hosts in one run.

Stand-ins, and why: GitHub is not reachable, so the moving ref is the branch ``main`` of a git repository served
on the first host by ``git daemon`` (git://, on that host's own network address, which the other host and the
first host's build containers reach); no registry is reachable, so the base image is made of each host's own
python3 and git (tests/e2e/image_builds.py). Each host runs its own Docker engine (Debian's docker.io, installed
by the container role), so the image really travels from one engine to the other. The Dockerfile is rigforge's
``chain-check`` template, whose ``SOURCE_REF`` is a declared git ref: its build checks the resolved commit out.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from image_builds import import_minimal_image, moving_ref_overrides, push_commit, serve_stand_in_repository
from pyinfra_run import PyinfraResult, assert_no_changes, run_pyinfra

from rigforge.images.plans import build_plan
from rigforge.profile.loader import load_profile
from rigforge.sandbox import SandboxHost, exec_in
from tests.e2e.interrupt import interrupt_when, processes

TESTS = Path(__file__).resolve().parents[1]
BASE_IMAGE = "rigforge-test/gitbase:1"
IMAGES_DEPLOY = "deploys/images.py"
CONTAINER_DEPLOY = "from roles import base, container\n\nbase.apply_base()\ncontainer.apply_container()\n"
BUILT = "image build: done in"  # build-image.sh's last line, once per docker build


def overrides(repository: str, ref: str = "main") -> dict:
    return moving_ref_overrides(repository, BASE_IMAGE, ref)


@dataclass
class Fleet:
    rigs: list[SandboxHost]
    work: Path
    repository: str
    inventory: Path
    first: PyinfraResult

    def sh(self, rig: SandboxHost, command: str) -> str:
        proc = exec_in(rig, command, timeout=300)
        assert proc.returncode == 0, f"{rig.name}: {command}: {proc.stderr}"
        return proc.stdout.strip()

    def commit(self, message: str) -> str:
        return push_commit(self.rigs[0], message)

    def tag(self, commit: str) -> str:
        plan = build_plan(load_profile("sandbox", overrides(self.repository)), {"SOURCE_REF": commit})
        assert plan is not None and plan.resolved
        return plan.tag

    def image(self, rig: SandboxHost, tag: str) -> dict:
        """``docker image inspect`` of ``tag`` on ``rig`` ({} when it is not there)."""
        text = exec_in(rig, f"docker image inspect {tag}").stdout
        found = json.loads(text) if text.strip().startswith("[") else []
        return found[0] if found else {}

    def contents(self, rig: SandboxHost, tag: str) -> tuple[dict, dict]:
        """The image's contents file beside the build log, and the one inside the image."""
        beside = json.loads(self.sh(rig, f"cat /var/log/rigforge/image-chain-check-{tag.split(':')[1]}.json"))
        inside = json.loads(self.sh(rig, f"cid=$(docker create {tag} true) && docker cp $cid:/etc/rigforge/image.json"
                                         " - | tar -xO; docker rm $cid >/dev/null"))
        return beside, inside

    def record(self, rig: SandboxHost) -> dict:
        return json.loads(self.sh(rig, "cat /var/lib/rigforge/images/records/chain-check-*.json"))


def _builds(result: PyinfraResult) -> list[str]:
    """The hosts whose output shows a docker build that finished."""
    return re.findall(rf"\[([\w-]+)\] {BUILT}", result.stdout + result.stderr)


@pytest.fixture(scope="module")
def fleet(sandbox, tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    work = tmp_path_factory.mktemp("fleet")
    rigs = [sandbox.fresh_host("fleeta"), sandbox.fresh_host("fleetb")]
    address = exec_in(rigs[0], "ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1").stdout.strip()
    inventory = sandbox.write_inventory(work / "inventory.py", rigs, "sandbox",
                                        overrides(f"git://{address}/standin.git"))
    container_deploy = work / "container_deploy.py"
    container_deploy.write_text(CONTAINER_DEPLOY)
    run_pyinfra(inventory, container_deploy)  # docker.io and git on both
    repository = serve_stand_in_repository(rigs[0])
    assert repository == f"git://{address}/standin.git"
    for rig in rigs:
        import_minimal_image(rig, BASE_IMAGE, extra_tools=("git",))
    fleet = Fleet(rigs, work, repository, inventory, PyinfraResult([], 0, "", ""))
    fleet.commit("one")
    fleet.first = run_pyinfra(inventory, IMAGES_DEPLOY)
    return fleet


def test_both_rigs_get_one_image_built_once_from_the_resolved_commit(fleet: Fleet) -> None:
    commit = fleet.sh(fleet.rigs[0], "git -C /srv/work rev-parse HEAD")
    tag = fleet.tag(commit)
    output = fleet.first.stdout + fleet.first.stderr
    assert len(_builds(fleet.first)) == 1, f"expected one docker build in all: {_builds(fleet.first)}"
    builder = next(rig for rig in fleet.rigs if rig.name == _builds(fleet.first)[0])
    other = next(rig for rig in fleet.rigs if rig is not builder)
    assert f"SOURCE_REF 'main' -> {commit} (git ls-remote on " in output
    assert re.search(rf"\[{other.name}\] image {re.escape(tag)}: got it from {builder.name}: [\d.]+ MB", output)
    images = [fleet.image(rig, tag) for rig in fleet.rigs]
    assert images[0] and images[0]["Id"] == images[1]["Id"]
    for rig, image in zip(fleet.rigs, images, strict=True):
        labels = image["Config"]["Labels"]
        assert labels["org.rigforge.commit.SOURCE_REF"] == commit
        assert labels["org.rigforge.repository.SOURCE_REF"] == fleet.repository
        assert labels["org.rigforge.build-hash"] == tag.split(":")[1]
        beside, inside = fleet.contents(rig, tag)
        assert beside == inside and inside["checkouts"]["SOURCE_REF"] == {"path": "/opt/source", "commit": commit}
        # The stand-in base has Python's standard library only: nothing to freeze (tests/unit/test_image_contents.py
        # freezes a real environment).
        assert inside["pip_freeze"] == [] and inside["versions"]["python"].startswith("3.11")
        record = fleet.record(rig)
        assert record["tag"] == tag and record["git_refs"]["SOURCE_REF"] == {
            "repository": fleet.repository, "ref": "main", "commit": commit}
    log = "/var/log/rigforge/image-chain-check-{}.log".format(tag.split(":")[1])
    assert exec_in(builder, f"test -s {log}").returncode == 0
    assert exec_in(other, f"test -e {log}").returncode != 0, "the other rig built it too"


def test_a_new_commit_on_the_ref_changes_nothing_and_no_remote_is_asked(fleet: Fleet) -> None:
    fleet.commit("two")
    dry = assert_no_changes(fleet.inventory, IMAGES_DEPLOY)
    assert "ls-remote" not in dry.stdout + dry.stderr
    run_pyinfra(fleet.inventory, IMAGES_DEPLOY)  # records the reads a no-op makes (rigforge/reads/read_ahead.py)
    noop = run_pyinfra(fleet.inventory, IMAGES_DEPLOY, "--debug")
    output = noop.stdout + noop.stderr
    assert "ls-remote" not in output
    for rig in fleet.rigs:
        # One round trip: the read-ahead, then the deploy lock taken and given back (measurements/noop_speed.py).
        assert len(re.findall(rf"Running command on {rig.name}: \(pty=", output)) == 3, output[-4000:]


def test_rebuild_resolves_afresh_builds_once_and_moves_both_rigs(fleet: Fleet) -> None:
    old = fleet.record(fleet.rigs[0])["tag"]
    commit = fleet.sh(fleet.rigs[0], "git -C /srv/work rev-parse HEAD")
    tag = fleet.tag(commit)
    result = run_pyinfra(fleet.inventory, IMAGES_DEPLOY, "--data", "rebuild=true")
    output = result.stdout + result.stderr
    assert tag != old and len(_builds(result)) == 1
    assert "rebuild=true: its git refs resolved afresh; the record had SOURCE_REF" in output
    images = [fleet.image(rig, tag) for rig in fleet.rigs]
    assert images[0] and images[0]["Id"] == images[1]["Id"]
    assert {image["Config"]["Labels"]["org.rigforge.commit.SOURCE_REF"] for image in images} == {commit}
    for rig in fleet.rigs:
        assert fleet.record(rig)["tag"] == tag
        assert fleet.contents(rig, tag)[0]["checkouts"]["SOURCE_REF"]["commit"] == commit
        assert fleet.image(rig, old), "the image the engine may still run was removed"
    assert_no_changes(fleet.inventory, IMAGES_DEPLOY)


def test_verify_checks_the_engine_runs_the_image_the_record_names(sandbox, fleet: Fleet) -> None:
    # A container named as the engine's, from the image of the first commit: the record names the rebuilt one.
    rig = fleet.rigs[1]
    tags = sorted(fleet.sh(rig, "docker image ls --format '{{.Repository}}:{{.Tag}}' rigforge/llama.cpp").split())
    old = next(tag for tag in tags if tag != fleet.record(rig)["tag"])
    keep_alive = "python3 -c 'import time; time.sleep(3600)'"
    fleet.sh(rig, f"docker run -d --name rigforge-engine --entrypoint sh {old} -c \"{keep_alive}\" >/dev/null")
    ssh_config = Path(sandbox.state_dir) / "ssh_config"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--hosts=paramiko://{rig.name}",
               f"--ssh-config={ssh_config}", "tests/verify/test_container.py", "-k", "image"]
    wrong = subprocess.run(command, cwd=TESTS.parent, capture_output=True, text=True, timeout=300)
    assert wrong.returncode != 0 and "rigforge-engine runs sha256:" in wrong.stdout, wrong.stdout[-3000:]
    fleet.sh(rig, f"docker rm -f rigforge-engine >/dev/null && docker run -d --name rigforge-engine --entrypoint sh "
                  f"{fleet.record(rig)['tag']} -c \"{keep_alive}\" >/dev/null")
    right = subprocess.run(command, cwd=TESTS.parent, capture_output=True, text=True, timeout=300)
    assert right.returncode == 0 and "3 passed" in right.stdout, right.stdout[-3000:]


def test_a_ref_that_does_not_resolve_stops_the_build_with_one_line(sandbox, fleet: Fleet) -> None:
    inventory = sandbox.write_inventory(fleet.work / "missing-ref.py", fleet.rigs[:1], "sandbox",
                                        overrides(fleet.repository, ref="no-such-branch"))
    result = run_pyinfra(inventory, IMAGES_DEPLOY, dry=True, check=False)
    lines = [line for line in (result.stdout + result.stderr).splitlines() if "no-such-branch" in line]
    assert result.returncode != 0
    assert lines == [f"    [{fleet.rigs[0].name}] image chain-check: engine.build.args.SOURCE_REF: 'no-such-branch' "
                     f"does not resolve in {fleet.repository} (git ls-remote on {fleet.rigs[0].name} lists no branch "
                     "or tag of that name); name an existing branch or tag, or pin a commit (40 hex digits)"], lines


@pytest.mark.slow
def test_a_transfer_cut_short_loads_nothing_and_the_next_run_transfers_it_whole(fleet: Fleet) -> None:
    # The controller SIGKILLed while the image travels (a laptop gone): the rig that was loading it has no image
    # under the tag, and the same command transfers it again, whole. The rig lost its image (its record kept), so
    # the run loads it from the other rig. Slow: pytest -m slow tests/e2e/test_image_fleet.py -k cut
    holder, target = fleet.rigs
    tag = fleet.record(target)["tag"]
    wanted = fleet.image(holder, tag)["Id"]
    fleet.sh(target, f"docker image rm {tag} >/dev/null")
    interrupt_when(fleet.inventory, IMAGES_DEPLOY, fleet.work / "cut.log",
                   lambda: bool(processes(target, "docker load")), signal.SIGKILL)
    assert "got it from" not in (fleet.work / "cut.log").read_text()
    assert fleet.image(target, tag) == {}, "a transfer cut short left an image under the tag"
    again = run_pyinfra(fleet.inventory, IMAGES_DEPLOY)
    assert fleet.image(target, tag)["Id"] == wanted and _builds(again) == []
    assert f"[{target.name}] image {tag}: got it from {holder.name}" in again.stdout + again.stderr
