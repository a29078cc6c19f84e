"""Service role: one systemd unit for the engine, generated from the profile, (re)started only when needed.

The unit runs ``docker run`` with the seed flags or the native launcher, one flag per line, reads the
nccl role's env file, and restarts on failure. It is restarted when the unit, the env file, the image
(or engine install) or the weights changed — once, whatever changed — and the role then waits for the
health endpoint; when it does not answer, the wait names the known failures its journal shows
(inventory/known-failures.yaml) with their fixes, prints the journal and fails the deploy. The engine's API key
and its reader are inputs too (roles/api_key.py).
"""

from __future__ import annotations

import hashlib
import shlex
from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files, server

from rigforge.context import current_profile, run_settings
from rigforge.known_failures import match, signature_data
from rigforge.operations import managed
from rigforge.operations.files import managed_file
from rigforge.operations.service import engine_service, file_unless_present
from rigforge.profile import Profile
from rigforge.recipes.choice import EXPERIMENT_RECORD
from rigforge.recipes.startup import STARTUP_RECORD, startup_needles
from rigforge.render import render
from rigforge.serving.engines import (
    CONTAINER_NAME,
    DOCKER,
    ENGINE_ENV_FILE,
    LAUNCHER_PATH,
    UNIT_NAME,
    environment_lines,
    exec_start_lines,
    health_url,
    image_ref,
    launch_command,
)
from roles import drain
from roles.api_key import api_key_inputs, api_key_watched_files, serve_api_key
from roles.weights import manifest_path, remote_script_text

UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
DROPIN_DIR = f"{UNIT_PATH}.d"
DROPIN_PATH = f"{DROPIN_DIR}/inputs.conf"
WAIT_SCRIPT = "/opt/rigforge/bin/rigforge-wait-healthy"
MATCHER_SOURCE = Path(match.__file__)
#: The engine unit's current InvocationID (empty when it is not running): a new one is a new engine start.
ENGINE_START_ID = f"systemctl show -p InvocationID --value {UNIT_NAME}"


def render_unit(profile: Profile) -> str:
    """The text of ``rigforge-engine.service`` for a profile (its header names the recipe it runs)."""
    container = profile.engine.native is None
    return render(
        "service/rigforge-engine.service.j2",
        profile,
        recipe=profile.engine.recipes.get(profile.engine.recipe or ""),
        container=container,
        docker=DOCKER,
        container_name=CONTAINER_NAME,
        env_file=ENGINE_ENV_FILE,
        # A container gets the engine's variables with -e; a native process from the unit.
        environment=[] if container else environment_lines(profile.engine.env),
        exec_lines=exec_start_lines(launch_command(profile)),
    )


def render_wait_script(profile: Profile) -> str:
    """The health-wait script, with the known-failure matcher and the startup signatures inlined.

    One file on the rig: the script needs nothing but python3 to name a known failure.
    """
    needles = " ".join(f"-e {shlex.quote(needle)}" for needle in startup_needles(profile.engine.kind))
    return render("service/wait-healthy.sh.j2", profile, matcher=MATCHER_SOURCE.read_text().rstrip(),
                  signatures=repr(signature_data("startup")), startup_record=STARTUP_RECORD,
                  startup_needles=needles or "-e ' '")


def engine_inputs(profile: Profile, unit: str) -> dict[str, str]:
    """What the engine starts from that is known here: the unit text and the native engine install."""
    inputs = {"unit": hashlib.sha256(unit.encode()).hexdigest(), **api_key_inputs(profile)}
    if profile.engine.native is not None:
        inputs["package"] = profile.engine.native.package
        launcher = render_launcher(profile)
        inputs[LAUNCHER_PATH] = hashlib.sha256(launcher.encode()).hexdigest()
    return inputs


def render_launcher(profile: Profile) -> str:
    """The launcher file exactly as the engine role installs it."""
    return remote_script_text(profile, "llama_launcher.py")


@deploy("Service")
def apply_service(profile: Profile | None = None, settled: bool = True, held_out: bool = False,
                  until: str = "its health wait passes") -> None:
    """Write the engine unit, keep it enabled and running with its current inputs, and wait until healthy.

    A restart of a serving rig drains it at the fleet's gateway first (roles/drain.py) unless ``held_out``; the
    caller returns it with ``drain.put_back`` after what proves the restart (``until``).

    + profile: the profile to serve (default: the current host's, with the recipe this run gives it)
    + settled: this is the recipe the rig keeps (not a trial of deploys/recipes.py): a record of a recipe
      experiment cut short is removed once the engine runs it healthy
    + held_out: the caller took the rig out of rotation for a whole change (a driver update, a tournament, a
      measured engine change) and returns it itself: no drain here
    + until: what the caller's return waits for, which the drain says (its health wait, the deploy's bench)
    """
    profile = profile or current_profile()
    container = profile.engine.native is None
    unit = render_unit(profile)
    say_engine_env_overrides(profile)
    serve_api_key(profile)  # before the unit starts: the key file and its reader (roles/api_key.py)
    if container:
        file_unless_present(name=f"Engine env file {ENGINE_ENV_FILE} (the nccl role fills it)",
                            dest=ENGINE_ENV_FILE, content=render("service/engine.env.j2", profile), mode="640")
        docker = profile.engine.docker
        host_dirs = sorted(source for source in (docker.volumes if docker else {}) if source.startswith("/"))
        for folder in host.loop(host_dirs):
            files.directory(name=f"Create {folder}", path=folder, mode="755", user="root", group="root")
    files.directory(name="Create /opt/rigforge/bin", path="/opt/rigforge/bin", mode="755", user="root", group="root")
    managed_file(name=f"Install {WAIT_SCRIPT}", dest=WAIT_SCRIPT, content=render_wait_script(profile), mode="755")
    managed_file(name=f"Write {UNIT_PATH}", dest=UNIT_PATH, content=unit)
    engine_service(
        name=f"Run {UNIT_NAME}",
        unit=UNIT_NAME,
        dropin=DROPIN_PATH,
        render_dropin=lambda digest: render("service/inputs.conf.j2", profile, digest=digest,
                                            env_file=ENGINE_ENV_FILE),
        inputs=engine_inputs(profile, unit),
        watched_files=[ENGINE_ENV_FILE, manifest_path(profile), *api_key_watched_files(profile)],
        image=image_ref(profile) if container else None,
        health_url=health_url(profile),
        health_timeout_s=profile.engine.health_timeout_s,
        wait_script=WAIT_SCRIPT,
        # A serving rig leaves the fleet gateway's rotation for the restart, returned by the caller's put_back;
        # a rig its caller holds out (a tournament's trials, a driver update, a measured engine change) is not
        # drained again.
        drain_first=(drain.drain_before_restart(profile, run_settings().drain_last, until)
                     if settled and not held_out else None),
    )
    if settled:
        managed.absent(name=f"Remove the record of a recipe experiment cut short ({EXPERIMENT_RECORD})",
                       path=EXPERIMENT_RECORD)


def fresh_start(profile: Profile, why: str) -> None:
    """Restart the engine and wait until it answers healthy: a new engine start although nothing it starts from
    changed (a tournament's next round, a driver update's next measured start). The health wait keeps the start's
    own lines, as after any start (templates/service/wait-healthy.sh.j2).

    + profile: the profile served (its health address and timeout)
    + why: the operation's name says it (e.g. "start 2 of 3 of default")
    """
    server.shell(name=f"Start {UNIT_NAME} afresh ({why})",
                 commands=[f"systemctl restart {shlex.quote(UNIT_NAME)}",
                           shlex.join(["sh", WAIT_SCRIPT, UNIT_NAME, health_url(profile),
                                       str(profile.engine.health_timeout_s)])])


def say_engine_env_overrides(profile: Profile) -> None:
    """Say where the engine's own NCCL variables (a recipe's, as the published K=64 command's NCCL_P2P_DISABLE)
    win over the rig's NCCL env: ``docker run -e`` comes after ``--env-file`` (/etc/nccl.conf stays as it is)."""
    if profile.nccl is None:
        return
    for key, value in profile.engine.env.items():
        if key.startswith("NCCL_"):
            rig = profile.nccl.env.get(key, "unset")
            host.log(f"engine env {key}={value} (recipe {profile.engine.recipe}) for the engine only, over the "
                     f"rig's NCCL env ({key}: {rig}); /etc/nccl.conf and other NCCL programs keep the rig's")
