"""Images role: the engine image the profile names, built once per fleet and rebuilt only when an input changed.

For ``engine.build`` the role first settles the commits of the build's git refs (rigforge/fleet/image_commits.py: the
rig's record, another rig's, or ``git ls-remote`` when none has one or with ``--data rebuild=true``) and records
them in /var/lib/rigforge/images/records/. It writes the build context under /var/lib/rigforge/images/<dockerfile>/
(Dockerfile with the commits, build-plan.json, image_contents.py, and for patches apply_patch.py plus each patch
fetched on the rig with its sha256 checked), then makes ``rigforge/<engine>:<content hash>`` present unless it
is: built here by the first rig of the run that needs it, or loaded from a rig that has it
(rigforge/fleet/image_share.py). The build log and the image's contents file (pip freeze, versions, commits) stay in
/var/log/rigforge/. For ``engine.image`` it pulls the image unless present. Either way the JIT cache volume is
emptied when the image the engine runs is not the one the volume's kernels came from.
"""

from __future__ import annotations

from pyinfra import host, logger, state
from pyinfra.api import deploy
from pyinfra.operations import files

from rigforge.context import current_profile, run_settings
from rigforge.fleet.image_commits import Resolution, record_document, resolve_for_host
from rigforge.images.plans import FETCH_SOURCE, IMAGES_ROOT, LOG_DIR, RECORDS_DIR, BuildPlan, build_plan, image_ref
from rigforge.operations.docker import context_file_fetched, image_pulled, jit_cache_emptied
from rigforge.operations.files import managed_file
from rigforge.operations.images import build_refused, image_contents_copied, image_provided
from rigforge.profile import Profile
from rigforge.render import render

BUILD_SCRIPT = f"{IMAGES_ROOT}/build-image.sh"
FETCH_SCRIPT = f"{IMAGES_ROOT}/fetch.py"


def _directory(path: str) -> None:
    files.directory(name=f"Create {path}", path=path, mode="755", user="root", group="root")


def resolved_plan(profile: Profile, request: BuildPlan) -> tuple[BuildPlan, Resolution] | None:
    """The plan with its git refs' commits for this rig, and where they come from; None (the host refused with
    one line) when a ref does not resolve."""
    resolution = resolve_for_host(state, host, request, run_settings().rebuild)
    if resolution.error:
        build_refused(name="Resolve the image's git refs", line=f"image {request.template}: {resolution.error}")
        return None
    plan = build_plan(profile, resolution.commits)
    assert plan is not None and plan.resolved
    for line in resolution_lines(plan, resolution):
        host.log(line, logger.info)
    return plan, resolution


def resolution_lines(plan: BuildPlan, resolution: Resolution) -> list[str]:
    """What a run says about the commits it builds from (nothing when the rig's own record gives them)."""
    if resolution.source in ("record", "pinned") or not plan.git_refs:
        return []
    refs = ", ".join(f"{ref.arg} {ref.ref!r} -> {ref.commit}" for ref in plan.git_refs)
    if resolution.source == "fleet":
        return [f"image {plan.template}: {refs}, as this fleet recorded it (resolved on {resolution.resolved_on} "
                f"at {resolution.resolved_at}); tag {plan.tag}"]
    lines = [f"image {plan.template}: {refs} (git ls-remote on {resolution.resolved_on}); tag {plan.tag}"]
    if resolution.previous is not None:
        same = resolution.previous == resolution.commits
        lines.insert(0, f"image {plan.template}: rebuild=true: its git refs resolved afresh"
                        + ("; the same commits as recorded" if same else "; the record had " + ", ".join(
                            f"{arg} {commit}" for arg, commit in resolution.previous.items())))
    return lines


def build_operation_name(tag: str) -> str:
    """The name of the operation that makes ``tag`` present (built by one rig of the run, loaded by the others)."""
    return f"Build {tag} (only when that tag is missing; one rig of the run builds it, the others load it)"


def _write_context(profile: Profile, plan: BuildPlan) -> None:
    for path in (IMAGES_ROOT, LOG_DIR, RECORDS_DIR, plan.context_dir):
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
    request = build_plan(profile)
    if request is None:
        image_pulled(name=f"Pull {profile.engine.image}", ref=image_ref(profile))
        image = image_ref(profile)
    else:
        resolved = resolved_plan(profile, request)
        if resolved is None:
            return
        plan, resolution = resolved
        _write_context(profile, plan)
        if resolution.source != "record":
            managed_file(name=f"Record the commits of {plan.template}'s git refs in {plan.record_path}",
                         dest=plan.record_path,
                         content=render("images/image-record.json.j2", profile,
                                        record=record_document(plan, resolution)))
        image_provided(name=build_operation_name(plan.tag), tag=plan.tag, arguments=plan.docker_build_arguments(),
                       log=plan.log_path, script=BUILD_SCRIPT, commits=plan.commits)
        image_contents_copied(name=f"Copy the image's contents file to {plan.contents_path}", tag=plan.tag,
                              dest=plan.contents_path)
        image = plan.tag
    docker = profile.engine.docker
    if docker is not None and docker.jit_cache_volume is not None:
        jit_cache_emptied(name=f"Empty volume {docker.jit_cache_volume} when the engine image changed",
                          volume=docker.jit_cache_volume, image=image)
