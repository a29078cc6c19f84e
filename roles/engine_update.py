"""Engine change role: a serving rig moved to another engine build, measured like a driver update.

A build is what the engine unit runs: a container image (``rigforge/<engine>:<content hash>`` built from
``engine.build``, whose commits the rig's image record names, or ``engine.image`` as published) or the native
server's package pin (the venv's marker, rigforge/operations/venv.py). When the rig serves (the unit is active)
a build rigforge recorded and this run wants another one (a rebuild from moved git refs, a new patch or build
arg, another image or pin) and no recipe switch comes with it (deploys/recipes.py judges recipes), the move is
measured (rigforge/updates/engine_change.py):

k engine starts benched on the old build (k sized from the rig's last measured spread within
``driver_update.starts_budget_s``, rigforge/updates/sizing.py) → the image built (or loaded, or pulled), the
engine installed, the unit moved to the new build, healthy → as many starts on the new one → the speed verdict
and the quality pass against the model's reference (roles/measured_change.py), kept as
``results/<host>/engine-updates/<stamp>.json`` naming both builds. No reboot is involved, so both sides run in
one boot. The plan line (and ``--dry``) says k, the minutes and what k resolves; "cannot tell" fails the deploy
unless ``--data on_cannot_tell=continue``.

On a regression with ``--data on_regression=rollback`` the unit is pointed back at the old build in the same run
(the old image is still on the rig: nothing is built or pulled; a native pin is installed again) and the rig's
image record is put back, so the next run stays there; the JIT cache volume, which records the new image, is
emptied for the old one, whose kernels are compiled again on first use. The deploy fails either way, naming both
builds. A first install, a rig whose engine does not serve, and a rig on its wanted build measure nothing.

Behind a fleet gateway (roles/drain.py) a measured move takes the rig out of rotation before its first start on the
old build and returns it only once the comparison passed (a regression or "cannot tell" leaves it out); any other
restart drains it just before ``systemctl restart`` and returns it after its health wait, or with ``benched_after``
(deploys/full.py) after the deploy's bench.
"""

from __future__ import annotations

from datetime import datetime, timezone

from pyinfra import host, logger, state
from pyinfra.facts.files import FileContents

from rigforge.bench_runs.plan import results_root, run_stamp
from rigforge.context import RunSettings, current_profile
from rigforge.facts.images import ImageRecordFile
from rigforge.facts.service import EngineService
from rigforge.fleet.image_commits import resolve_for_host
from rigforge.images.plans import build_plan
from rigforge.operations.docker import jit_cache_emptied
from rigforge.operations.files import managed_file
from rigforge.operations.venv import installed_spec, venv_marker
from rigforge.profile import Profile
from rigforge.serving.engines import LLAMA_VENV, UNIT_NAME, image_ref
from rigforge.updates.engine_change import EngineBuild, EngineChange, engine_plan_line, unit_image
from roles import bench, drain, engine, images, service
from roles.measured_change import MeasuredChange, judge_change, measure_side, size_starts
from roles.service import UNIT_PATH


def wanted_build(profile: Profile, rebuild: bool) -> EngineBuild | None:
    """The build this run gives the rig (None: a build whose git refs do not resolve; the images role says so)."""
    native = profile.engine.native
    if native is not None:
        return EngineBuild(package=native.package)
    request = build_plan(profile)
    if request is None:
        return EngineBuild(image=image_ref(profile))
    resolution = resolve_for_host(state, host, request, rebuild)  # decided once per run: the images role's too
    if resolution.error:
        return None
    return EngineBuild(image=build_plan(profile, resolution.commits).tag, commits=dict(resolution.commits))


def running_build(profile: Profile, wanted: EngineBuild) -> EngineBuild | None:
    """The build the rig's engine runs now, as rigforge installed it (None: none recorded, a first install)."""
    if profile.engine.native is not None:
        spec = installed_spec(host.get_fact(FileContents, path=venv_marker(LLAMA_VENV)))
        return EngineBuild(package=spec) if spec else None
    unit = host.get_fact(FileContents, path=UNIT_PATH)
    image = unit_image("\n".join(unit), wanted.image) if unit and wanted.image else None
    if image is None:
        return None
    request = build_plan(profile)
    record = host.get_fact(ImageRecordFile, path=request.record_path) if request else None
    return EngineBuild(image=image, commits=dict(record.commits) if record and record.tag == image else {})


def build_profile(profile: Profile, build: EngineBuild) -> Profile:
    """``profile`` serving ``build``: a native pin, or an image named as is (the old tag of a rebuilt image)."""
    engine_settings = profile.engine
    if engine_settings.native is not None:
        native = engine_settings.native.model_copy(update={"package": build.package})
        return profile.model_copy(update={"engine": engine_settings.model_copy(update={"native": native})})
    return profile.model_copy(update={"engine": engine_settings.model_copy(update={"build": None,
                                                                                   "image": build.image})})


def plan_engine_change(profile: Profile, settings: RunSettings) -> EngineChange | None:
    """Read what runs and what is wanted; None when the wanted build cannot be named (a ref that does not resolve)."""
    wanted = wanted_build(profile, settings.rebuild)
    if wanted is None:
        return None
    serving = host.get_fact(EngineService, unit=UNIT_NAME).running
    return EngineChange(running_build(profile, wanted), wanted, serving, recipe_switch=bool(settings.recipe))


def apply_engine_change(settings: RunSettings, move_unit: bool, benched_after: bool = False) -> None:
    """The engine image (and with ``move_unit`` the engine and its unit), measured before and after when a serving
    rig moves to another build (see the module docstring).

    A serving rig that restarts leaves the fleet gateway's rotation first (roles/drain.py) and comes back only
    after what proves the restart: a measured move after its comparison; any other restart after its health wait,
    or with ``benched_after`` after the deploy's bench (the caller's ``drain.put_back``).

    + settings: the run's switches (rebuild, recipe, on_regression)
    + move_unit: deploys/serve.py and full.py: install the engine and move the unit too; deploys/images.py: only
      the image, unless the move is measured (a serving rig is moved to the build it measures)
    + benched_after: the deploy benches the engine next (deploys/full.py) and returns the rig after that bench
    """
    profile = current_profile()
    if not move_unit and profile.engine.native is not None:
        return  # the images deploy installs no native engine (deploys/serve.py and full.py do)
    change = plan_engine_change(profile, settings)
    if change is not None and change.before is not None and change.changes:
        host.log(change.reason(), logger.info)
    if change is None or not change.measured:
        images.apply_images(profile)
        if move_unit:
            engine.apply_engine(profile)
            proof = "its bench passes" if benched_after else "its health wait passes"
            service.apply_service(profile, until=proof)
            if not benched_after:  # this deploy runs no bench: the health wait is what proves the restart
                drain.put_back(profile, "its health wait passed")
        return
    measured_move(profile, change, settings)


def measured_move(profile: Profile, change: EngineChange, settings: RunSettings) -> None:
    """k starts on the old build, the move, k starts on the new one, the verdict (roles/measured_change.py)."""
    before = change.before
    assert before is not None
    started, results = run_stamp(datetime.now(timezone.utc)), results_root()
    request = build_plan(profile)
    record_path = request.record_path if request else None
    old_record = "\n".join(host.get_fact(FileContents, path=record_path) or []) if record_path else ""
    sized = size_starts(profile)
    host.log(f"engine change: {engine_plan_line(profile, change, sized)}", logger.info)
    # Out of rotation before the baseline's first restart, back only once the starts after passed the comparison.
    drain.take_out(profile, "engine change", "the starts on the new build are benched and compared",
                   settings.drain_last)
    bench.install_client(profile)
    measure_side(build_profile(profile, before), f"on {before.words()}", results, sized.starts)
    images.apply_images(profile)
    engine.apply_engine(profile)
    service.apply_service(profile, held_out=True)
    measure_side(profile, f"on {change.after.words()}", results, sized.starts)
    judge_change(name="Engine change: compare the starts before and after", profile=profile,
                 change=MeasuredChange("engine", before.words(), change.after.words(),
                                       stay_words=f"{before.words()} is still on the rig; --data "
                                                  "on_regression=rollback puts a regressing build back at once"),
                 settings=settings, started=started, baselines=None,
                 roll_back=lambda: roll_back(profile, before, record_path, old_record), starts=sized.starts)
    # A regression or "cannot tell" fails the deploy before this (a rollback too): the rig stays out of rotation.
    drain.put_back(profile, "the starts on the new build passed their comparison")


def roll_back(profile: Profile, before: EngineBuild, record_path: str | None, old_record: str) -> None:
    """Point the engine back at ``before`` (operations nested in the judge; see the module docstring)."""
    previous = build_profile(profile, before)
    if record_path and old_record.strip():
        managed_file(name=f"Put back the image record of {before.words()}", dest=record_path,
                     content=old_record + "\n")
    docker = profile.engine.docker
    if before.image and docker is not None and docker.jit_cache_volume is not None:
        jit_cache_emptied(name=f"Empty volume {docker.jit_cache_volume} for {before.image} (its kernels are "
                               "compiled again on first use)", volume=docker.jit_cache_volume, image=before.image)
    engine.apply_engine(previous)
    service.apply_service(previous, held_out=True)  # the deploy fails after it: the rig stays out of rotation
