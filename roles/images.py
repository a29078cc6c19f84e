"""Images role: the engine image the profile names, built on the rig and rebuilt only when an input changed.

For ``engine.build`` the role writes the build context under /var/lib/rigforge/images/<dockerfile>/
(Dockerfile, build-plan.json, and for patches apply_patch.py plus each patch fetched on the rig with its
sha256 checked), then builds ``rigforge/<engine>:<content hash>`` unless that tag exists; the build log
stays in /var/log/rigforge/. For ``engine.image`` it pulls the image unless present. Either way the JIT
cache volume is emptied when the image the engine runs is not the one the volume's kernels came from.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files

from rigforge.context import current_profile
from rigforge.images import FETCH_SOURCE, IMAGES_ROOT, LOG_DIR, BuildPlan, build_plan, image_ref
from rigforge.operations.docker import context_file_fetched, image_built, image_pulled, jit_cache_emptied
from rigforge.operations.files import managed_file
from rigforge.profile import Profile
from rigforge.render import render

BUILD_SCRIPT = f"{IMAGES_ROOT}/build-image.sh"
FETCH_SCRIPT = f"{IMAGES_ROOT}/fetch.py"


def _directory(path: str) -> None:
    files.directory(name=f"Create {path}", path=path, mode="755", user="root", group="root")


def _write_context(profile: Profile, plan: BuildPlan) -> None:
    for path in (IMAGES_ROOT, LOG_DIR, plan.context_dir):
        _directory(path)
    managed_file(name=f"Write {BUILD_SCRIPT}", dest=BUILD_SCRIPT, mode="755",
                 content=render("images/build-image.sh.j2", profile))
    managed_file(name=f"Write {plan.context_dir}/Dockerfile", dest=f"{plan.context_dir}/Dockerfile",
                 content=plan.dockerfile)
    managed_file(name=f"Write {plan.context_dir}/build-plan.json", dest=f"{plan.context_dir}/build-plan.json",
                 content=render("images/build-plan.json.j2", profile, plan=plan.record()))
    for folder in sorted({name.rpartition("/")[0] for name in plan.context_files if "/" in name}):
        _directory(f"{plan.context_dir}/{folder}")
    for file_name, text in plan.context_files.items():
        managed_file(name=f"Write {plan.context_dir}/{file_name}", dest=f"{plan.context_dir}/{file_name}",
                     content=text)
    fetched = [patch for patch in plan.patches if patch.url is not None]  # the others are context_files
    if not fetched:
        return
    if not any(name.startswith("patches/") for name in plan.context_files):
        _directory(f"{plan.context_dir}/patches")
    managed_file(name=f"Write {FETCH_SCRIPT}", dest=FETCH_SCRIPT, mode="755", content=FETCH_SOURCE.read_text())
    for patch in host.loop(fetched):
        context_file_fetched(name=f"Fetch {patch.file} (sha256 {patch.sha256[:12]}…)", url=patch.url,
                             dest=f"{plan.context_dir}/{patch.file}", sha256=patch.sha256, fetch_script=FETCH_SCRIPT)


@deploy("Engine image")
def apply_images(profile: Profile | None = None) -> None:
    """Build (or pull) the engine image the profile names and keep the JIT cache volume consistent with it.

    + profile: the profile to serve (default: the current host's, with the recipe this run gives it)
    """
    profile = profile or current_profile()
    if profile.engine.native is not None:
        return
    plan = build_plan(profile)
    if plan is not None:
        _write_context(profile, plan)
        image_built(name=f"Build {plan.tag} (only when that tag is missing)", tag=plan.tag,
                    arguments=plan.docker_build_arguments(), log=plan.log_path, script=BUILD_SCRIPT)
    else:
        image_pulled(name=f"Pull {profile.engine.image}", ref=image_ref(profile))
    docker = profile.engine.docker
    if docker is not None and docker.jit_cache_volume is not None:
        jit_cache_emptied(name=f"Empty volume {docker.jit_cache_volume} when the engine image changed",
                          volume=docker.jit_cache_volume, image=image_ref(profile))
