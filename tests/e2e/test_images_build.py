"""Real image builds on a sandbox host: content-hash tags, patches applied to real FlashInfer files, JIT cache.

The host runs its own Docker engine (Debian's docker.io, installed by the container role and run by the
host's systemd), so images and volumes stay inside the host. No registry is reachable, so the base image
``rigforge-test/base:1`` is made in the host from its own files (python3, sh, coreutils: ~40 MB) plus the
three FlashInfer files the test patch touches, taken from the real flashinfer-python 0.7.2.post1 wheel.
The profile is the sandbox one with an engine build of ``templates/images/chain-check.Dockerfile.j2``,
and its patch is the FlashInfer test patch (tests/fixtures/patches/), served in the host on 127.0.0.1
and fetched by the role with its sha256 checked.
"""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from image_builds import JIT_VOLUME, build_overrides, import_minimal_image
from pyinfra_run import assert_no_changes, changed_ops, run_pyinfra

from rigforge.images.plans import build_plan
from rigforge.operations.lock import LOCK_PATH
from rigforge.profile.loader import load_profile
from rigforge.sandbox import SandboxHost, exec_in
from rigforge.sandbox.docker import docker
from roles.images import build_operation_name
from tests.e2e.interrupt import interrupt_when, processes
from tests.e2e.power_cut import power_cut, power_on, run_and_cut
from tests.support_flashinfer import GENERATE_KERNELS, extract_package

TESTS = Path(__file__).resolve().parents[1]
PATCH = TESTS / "fixtures" / "patches" / "flashinfer-0.7.2.post1-k64-test.patch"
PATCH_SHA256 = hashlib.sha256(PATCH.read_bytes()).hexdigest()
# The same patch with one context line that FlashInfer 0.7.2.post1 does not have: it cannot apply.
CONFLICT = PATCH.read_text().replace("         [128, 128, 256],\n", "         [128, 128, 512],\n", 1)
CONFLICT_SHA256 = hashlib.sha256(CONFLICT.encode()).hexdigest()
PATCH_PORT = 8766
BASE_IMAGE = "rigforge-test/base:1"
SLOW_BASE = "rigforge-test/base:slow"
# Long enough to be caught mid-step (polled every 0.3 s), short enough not to stretch the suite: both cases
# wait it out once (the Ctrl-C build finishes it; the build after SIGKILL runs it again).
SLOW_STEP_S = 20
SLOW_STEP = "rigforge-slow-build-step"  # the slow step's argv marker (the minimal base has no sleep)
VOLUME = JIT_VOLUME
IMAGES_DEPLOY = "deploys/images.py"
CONTAINER_DEPLOY = "from roles import base, container\n\nbase.apply_base()\ncontainer.apply_container()\n"


def overrides(test_arg: str, sha256: str = PATCH_SHA256, patch: str = "k64-test.patch",
              base_image: str = BASE_IMAGE) -> dict:
    """The sandbox profile with an engine image build (and no NVIDIA toolkit: test_container covers it)."""
    return build_overrides({"dockerfile": "chain-check", "base_image": base_image, "args": {"TEST_ARG": test_arg},
                            "patches": [{"url": f"http://127.0.0.1:{PATCH_PORT}/{patch}", "sha256": sha256,
                                         "root": "flashinfer"}]})


def tag_for(test_arg: str, base_image: str = BASE_IMAGE) -> str:
    plan = build_plan(load_profile("sandbox", overrides(test_arg, base_image=base_image)))
    assert plan is not None
    return plan.tag


@dataclass
class ImageHost:
    host: SandboxHost
    work: Path
    first_run_output: str

    def inventory(self, sandbox, test_arg: str, sha256: str = PATCH_SHA256, patch: str = "k64-test.patch",
                  base_image: str = BASE_IMAGE) -> Path:
        path = self.work / f"inventory-{test_arg}-{sha256[:6]}.py"
        return sandbox.write_inventory(path, [self.host], "sandbox", overrides(test_arg, sha256, patch, base_image))

    def sh(self, command: str) -> str:
        proc = exec_in(self.host, command, timeout=300)
        assert proc.returncode == 0, f"{self.host.name}: {command}: {proc.stderr}"
        return proc.stdout.strip()

    def image_id(self, tag: str) -> str:
        return self.sh(f"docker image inspect --format '{{{{.Id}}}}' {tag} 2>/dev/null || true")

    def in_volume(self, command: str) -> str:
        return self.sh(f"docker run --rm -v {VOLUME}:/cache {BASE_IMAGE} sh -c '{command}'")


def _make_base_image(host: SandboxHost, work: Path) -> None:
    site = work / "site-packages"
    extract_package(site)
    docker("exec", host.container, "mkdir", "-p", "/tmp/base")
    docker("cp", str(site / "flashinfer"), f"{host.container}:/tmp/base/flashinfer")
    import_minimal_image(host, "rigforge-test/minimal:1")
    script = ("printf 'FROM rigforge-test/minimal:1\\nCOPY flashinfer /usr/lib/python3/dist-packages/flashinfer\\n'"
              f" > /tmp/base/Dockerfile && docker build -q -t {BASE_IMAGE} /tmp/base")
    proc = exec_in(host, ["sh", "-c", script], timeout=300)
    assert proc.returncode == 0, proc.stderr


def _serve_patch(host: SandboxHost, work: Path) -> None:
    docker("exec", host.container, "mkdir", "-p", "/srv/test-patches")
    docker("cp", str(PATCH), f"{host.container}:/srv/test-patches/k64-test.patch")
    (work / "conflict.patch").write_text(CONFLICT)
    docker("cp", str(work / "conflict.patch"), f"{host.container}:/srv/test-patches/conflict.patch")
    docker("exec", host.container, "systemd-run", "--unit", "test-patches", "--collect", "python3", "-m",
           "http.server", str(PATCH_PORT), "--bind", "127.0.0.1", "--directory", "/srv/test-patches")


@pytest.fixture(scope="module")
def built(sandbox, tmp_path_factory: pytest.TempPathFactory) -> ImageHost:
    work = tmp_path_factory.mktemp("images")
    host = sandbox.fresh_host("img")
    image_host = ImageHost(host, work, "")
    _serve_patch(host, work)
    # The engine first (the base image is made with it), then the whole images deploy.
    container_deploy = work / "container_deploy.py"
    container_deploy.write_text(CONTAINER_DEPLOY)
    run_pyinfra(image_host.inventory(sandbox, "one"), container_deploy)
    _make_base_image(host, work)
    result = run_pyinfra(image_host.inventory(sandbox, "one"), IMAGES_DEPLOY)
    image_host.first_run_output = result.stdout + result.stderr
    return image_host


def test_first_run_builds_the_image_with_the_patch_applied(built: ImageHost) -> None:
    tag = tag_for("one")
    assert tag.startswith("rigforge/llama.cpp:")
    image_id = built.image_id(tag)
    assert image_id.startswith("sha256:")
    # Progress lines came back as the build ran, and the whole log stays on the host.
    assert "Step 1/" in built.first_run_output and "image build: done in" in built.first_run_output
    assert "applied-now 01-k64-test.patch: 3 files" in built.first_run_output
    log = f"/var/log/rigforge/image-chain-check-{tag.split(':')[1]}.log"
    assert "Successfully tagged " + tag in built.sh(f"cat {log}")
    # The real FlashInfer file in the image carries the patch; the build args arrived.
    patched = f"/usr/lib/python3/dist-packages/flashinfer/{GENERATE_KERNELS}"
    assert "[128, 256, 64]" in built.sh(f"docker run --rm {tag} cat {patched}")
    assert "TEST_ARG=one" in built.sh(f"docker run --rm {tag} cat /etc/rigforge-build-args").splitlines()
    assert built.in_volume("cat /cache/.rigforge-image") == image_id
    assert f'"tag": "{tag}"' in built.sh("cat /var/lib/rigforge/images/chain-check/build-plan.json")


def test_second_run_builds_nothing_and_keeps_the_jit_cache(sandbox, built: ImageHost) -> None:
    inventory = built.inventory(sandbox, "one")
    assert_no_changes(inventory, IMAGES_DEPLOY)
    built.in_volume("mkdir -p /cache/flashinfer && echo kernel > /cache/flashinfer/cached.so")

    result = run_pyinfra(inventory, IMAGES_DEPLOY)

    assert changed_ops(result) == []
    assert built.in_volume("cat /cache/flashinfer/cached.so") == "kernel"


def test_dry_diff_shows_the_new_dockerfile_and_changes_nothing(sandbox, built: ImageHost) -> None:
    result = run_pyinfra(built.inventory(sandbox, "two"), IMAGES_DEPLOY, "--diff", dry=True)
    output = result.stdout + result.stderr
    assert "Will modify /var/lib/rigforge/images/chain-check/Dockerfile" in output
    assert '+ ARG TEST_ARG="two"' in output and '- ARG TEST_ARG="one"' in output
    assert "Will modify /var/lib/rigforge/images/chain-check/build-plan.json" in output
    assert any(op["name"].startswith("Engine image | Build ") for op in result.plan if op["hosts_with_change"])
    assert 'ARG TEST_ARG="one"' in built.sh("cat /var/lib/rigforge/images/chain-check/Dockerfile")
    assert built.image_id(tag_for("two")) == ""


def test_a_changed_build_arg_rebuilds_once_and_empties_the_jit_cache(sandbox, built: ImageHost) -> None:
    inventory = built.inventory(sandbox, "two")
    result = run_pyinfra(inventory, IMAGES_DEPLOY)

    changed = changed_ops(result)
    assert [name for name in changed if name.startswith("Engine image | Build ")] == [
        f"Engine image | {build_operation_name(tag_for('two'))}"]
    new_id = built.image_id(tag_for("two"))
    assert new_id and built.image_id(tag_for("one"))  # the old image is kept: the service may still run it
    assert "TEST_ARG=two" in built.sh(f"docker run --rm {tag_for('two')} cat /etc/rigforge-build-args")
    assert built.in_volume("ls -A /cache") == ".rigforge-image"
    assert built.in_volume("cat /cache/.rigforge-image") == new_id
    assert_no_changes(inventory, IMAGES_DEPLOY)


def test_verify_suite_passes_on_the_built_host(sandbox, built: ImageHost) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--hosts=paramiko://{built.host.name}",
         f"--ssh-config={Path(sandbox.state_dir) / 'ssh_config'}", "tests/verify/test_container.py"],
        cwd=TESTS.parent, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    # skipped: the NVIDIA toolkit (off in this profile), the engine container (no engine is served here)
    assert "4 passed, 2 skipped" in result.stdout


def test_a_patch_with_the_wrong_sha256_is_refused_before_the_build(sandbox, built: ImageHost) -> None:
    wrong = "0" * 64
    result = run_pyinfra(built.inventory(sandbox, "three", wrong), IMAGES_DEPLOY, check=False)

    assert result.returncode != 0
    assert f"expected {wrong}" in result.stdout + result.stderr
    assert built.sh("ls /var/lib/rigforge/images/chain-check/patches") == "01-k64-test.patch"
    assert built.sh("sha256sum < /var/lib/rigforge/images/chain-check/patches/01-k64-test.patch") \
        .startswith(PATCH_SHA256)
    assert built.image_id(tag_for("three")) == ""


def test_a_patch_that_does_not_fit_fails_the_build_naming_file_and_hunk(sandbox, built: ImageHost) -> None:
    inventory = built.inventory(sandbox, "four", CONFLICT_SHA256, "conflict.patch")
    result = run_pyinfra(inventory, IMAGES_DEPLOY, check=False)

    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "image build: FAILED" in output
    assert "jit/gemm/cutlass/generate_kernels.py: hunk 1 @@ -842,6 +842,10 @@ does not match" in output
    plan = build_plan(load_profile("sandbox", overrides("four", CONFLICT_SHA256, "conflict.patch")))
    assert plan is not None and built.image_id(plan.tag) == ""
    assert "does not match" in built.sh(f"cat {plan.log_path}")


def _slow_base(built: ImageHost, case: str) -> str:
    """A base image whose ONBUILD step sleeps (one per case: a cached step would not run again)."""
    base = f"{SLOW_BASE}-{case}"
    folder = built.work / f"slow-{case}"
    folder.mkdir(exist_ok=True)
    (folder / "Dockerfile").write_text(f'FROM {BASE_IMAGE}\nONBUILD RUN ["python3", "-c", '
                                       f'"import time; time.sleep({SLOW_STEP_S})", "{SLOW_STEP}", "{case}"]\n')
    docker("cp", str(folder), f"{built.host.container}:/tmp/slow-{case}")
    built.sh(f"docker build -q -t {base} /tmp/slow-{case}")
    return base


@pytest.mark.slow  # 85 s: out of the suite's time budget; the power cut below is its sibling
def test_a_build_stopped_by_ctrl_c_finishes_whole_and_by_sigkill_tags_nothing(sandbox, built: ImageHost) -> None:
    # The controller goes away mid-build. Ctrl-C: pyinfra lets the command under way finish before it exits
    # ("Exiting upon user request!"), so the build completes and its tag names a whole image. SIGKILL (or a
    # dropped connection): the build runs on a terminal, so the hang-up ends its docker client and the daemon
    # cancels the build: nothing is tagged. Either way the next run converges. A base image whose ONBUILD step
    # sleeps keeps the build under way long enough to be caught in the middle.
    def slow_step_runs() -> bool:
        return bool(processes(built.host, SLOW_STEP))

    base = _slow_base(built, "ctrl-c")
    ctrl_c = built.inventory(sandbox, "ctrl-c", base_image=base)
    interrupt_when(ctrl_c, IMAGES_DEPLOY, built.work / "ctrl-c.log", slow_step_runs, signal.SIGINT,
                   exit_timeout_s=SLOW_STEP_S + 240)
    assert "Successfully tagged" in (built.work / "ctrl-c.log").read_text()
    assert "TEST_ARG=ctrl-c" in built.sh(f"docker run --rm {tag_for('ctrl-c', base)} cat /etc/rigforge-build-args")

    base = _slow_base(built, "killed")
    killed = built.inventory(sandbox, "killed", base_image=base)
    interrupt_when(killed, IMAGES_DEPLOY, built.work / "killed.log", slow_step_runs, signal.SIGKILL)
    deadline = time.monotonic() + SLOW_STEP_S * 0.75  # well before the sleep would end by itself
    while slow_step_runs():  # cancelled, not left to finish its sleep
        assert time.monotonic() < deadline, "the build went on without its controller"
        time.sleep(0.5)
    assert built.image_id(tag_for("killed", base)) == "", "an unfinished build was tagged"

    again = run_pyinfra(killed, IMAGES_DEPLOY)
    assert "taking over the deploy lock held by" in again.stdout + again.stderr
    assert "TEST_ARG=killed" in built.sh(f"docker run --rm {tag_for('killed', base)} cat /etc/rigforge-build-args")
    assert exec_in(built.host, f"test -e {LOCK_PATH}").returncode != 0
    assert_no_changes(killed, IMAGES_DEPLOY)


@pytest.mark.slow
def test_a_power_cut_in_the_build_tags_nothing_and_the_same_command_builds_it(sandbox, built: ImageHost) -> None:
    # The whole host SIGKILLed mid-build (docker kill: its Docker engine dies with the build), then started: the
    # cut run ends in the one lost-connection line, nothing was tagged, the same command builds the image whole.
    # Slow: pytest -m slow tests/e2e/test_images_build.py -k power_cut (the module's host and first build first).
    base = _slow_base(built, "power")
    inventory = built.inventory(sandbox, "power", base_image=base)
    cut = run_and_cut(inventory, IMAGES_DEPLOY, built.work / "power.log",
                      lambda: bool(processes(built.host, SLOW_STEP)), lambda: power_cut(built.host))
    power_on(built.host, sandbox.state)
    lost = [line.strip() for line in cut.stderr.splitlines() if "connection lost during" in line]
    print("\n".join(lost))
    assert cut.returncode != 0 and len(lost) == 1, cut.stderr[-4000:]
    assert built.image_id(tag_for("power", base)) == "", "an unfinished build was tagged"

    run_pyinfra(inventory, IMAGES_DEPLOY)
    assert "TEST_ARG=power" in built.sh(f"docker run --rm {tag_for('power', base)} cat /etc/rigforge-build-args")
    assert_no_changes(inventory, IMAGES_DEPLOY)
