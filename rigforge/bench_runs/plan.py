"""The smoke benchmark a rig gets from its profile: the client's config, its metadata, and where things go.

Pure functions and data: the bench role (``roles/bench.py``) reads facts on the rig and hands them
here; unit tests call these without a host.

- The client (``rigforge/__init__.py`` + ``rigforge/bench/``) is uploaded to ``/opt/rigforge/lib/rigforge``
  and run with the rig's own ``python3`` against the engine on the rig's loopback.
- Each run is one UTC timestamp: ``/var/lib/rigforge/bench/<stamp>.config.json`` and ``<stamp>.json`` on
  the rig (``latest.json`` points at the newest), and ``results/<host>/<stamp>/`` on the controller
  (``result.json``, ``summary.md``, ``plot.png``; ``results/<host>/latest`` points at the newest).

Example::

    config = bench_config(profile, run_metadata(profile, "rig2x-a", versions))
    paths = host_run_paths(run_stamp(datetime.now(timezone.utc)))
    host.run_shell_command(client_command(paths))
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from rigforge.bench.__main__ import EXIT_CHECKS_FAILED, EXIT_OK
from rigforge.bench.config import config_from_dict
from rigforge.profile import Profile
from rigforge.profile.loader import profile_hash
from rigforge.serving.api_key import KEY_FILE, needs_api_key
from rigforge.serving.engines import REMOTE_LIB_DIR

#: The package root on the controller, whose ``__init__.py`` and ``bench/`` are uploaded.
PACKAGE_DIR = Path(__file__).resolve().parents[1]
REMOTE_PACKAGE_DIR = f"{REMOTE_LIB_DIR}/rigforge"
HOST_RESULTS_DIR = "/var/lib/rigforge/bench"
HOST_LATEST_NAME = "latest.json"
#: The rig's last measured change (driver update, engine build change) as its judge left it, for the monitoring.
HOST_CHANGE_FILE = f"{HOST_RESULTS_DIR}/measured-change.json"
#: Where results land on the controller: ``$RIGFORGE_RESULTS_DIR`` or ``results`` in the working directory.
RESULTS_DIR_VARIABLE = "RIGFORGE_RESULTS_DIR"
DEFAULT_RESULTS_DIR = "results"
CONTROLLER_LATEST_NAME = "latest"
#: The client's exit status is echoed after it on this marker, so a failed check (2) can be told from a crash.
EXIT_MARKER = "rigforge-bench-exit="
#: Exit statuses after which the client has written its result file.
RESULT_WRITTEN = (EXIT_OK, EXIT_CHECKS_FAILED)


@dataclass(frozen=True)
class RigVersions:
    """What the rig runs, read from its facts when the bench starts (None where the rig has none).

    + driver_version / cuda_driver_version: as nvidia-smi reports them
    + kernel: the running kernel release (``uname -r``), the one the NVIDIA module was loaded into
    + gpus: product names, one per GPU
    + image: the image the engine runs (container engines): ``engine.image``, or the tag rigforge built, named
      from the commits the rig's record gives its git refs (the bench role reads it, as the service's unit does)
    + image_id: the local ID of the engine image (container engines)
    + image_git_refs: the git refs the image was built from: build arg -> repository, ref as named, commit
    + weights_revision / weights_origin: from the weights manifest the weights role wrote
    + weights_sha256: file name -> sha256 from that manifest
    + engine_start: the engine unit's InvocationID: which engine start was measured (a driver update reuses a
      recent baseline only of as many distinct starts as ``bench.verdicts.starts``)
    """

    driver_version: str | None = None
    cuda_driver_version: str | None = None
    kernel: str | None = None
    gpus: tuple[str, ...] = ()
    image: str | None = None
    image_id: str | None = None
    image_git_refs: dict[str, dict[str, str | None]] = field(default_factory=dict)
    weights_revision: str | None = None
    weights_origin: str | None = None
    weights_sha256: dict[str, str] = field(default_factory=dict)
    engine_start: str | None = None


@dataclass(frozen=True)
class HostRunPaths:
    """One run's files on the rig."""

    config: str
    result: str
    latest: str


@dataclass(frozen=True)
class ControllerRunPaths:
    """One run's files on the controller."""

    run_dir: Path
    result: Path
    summary: Path
    plot: Path
    latest_link: Path


def library_files(package_dir: Path = PACKAGE_DIR) -> dict[str, str]:
    """Remote path -> source text of every file the client needs (``rigforge/__init__.py``, ``rigforge/bench/*.py``).

    Compiled caches are never uploaded: the rig's python3 writes its own.
    """
    sources = [package_dir / "__init__.py", *sorted((package_dir / "bench").glob("*.py"))]
    return {f"{REMOTE_PACKAGE_DIR}/{path.relative_to(package_dir).as_posix()}": path.read_text() for path in sources}


def library_dirs() -> list[str]:
    """The folders ``library_files`` writes into, parents first."""
    return [REMOTE_LIB_DIR, REMOTE_PACKAGE_DIR, f"{REMOTE_PACKAGE_DIR}/bench"]


def bench_base_url(profile: Profile) -> str:
    """The engine's root URL as seen from the rig itself (an all-interfaces bind is asked on loopback)."""
    address = "127.0.0.1" if profile.engine.host == "0.0.0.0" else profile.engine.host
    return f"http://{address}:{profile.engine.port}"


def engine_metadata(profile: Profile, versions: RigVersions) -> dict[str, Any]:
    """How the engine runs: its kind and the package pin or image (with the image's local ID and, for an image
    rigforge built, the commits of its git refs)."""
    engine = profile.engine
    described: dict[str, Any] = {"engine": engine.kind, "served_model_name": engine.served_model_name}
    if engine.native is not None:
        described["engine_package"] = engine.native.package
    else:
        described["image"] = versions.image
        described["image_id"] = versions.image_id
        if profile.engine.build is not None:
            described["image_git_refs"] = versions.image_git_refs
    return described


def model_metadata(profile: Profile, versions: RigVersions) -> dict[str, Any]:
    """Which weights were served: repository and revision (as fetched, else as asked), or file hashes."""
    model = profile.model
    described: dict[str, Any] = {"model_source": model.source, "model_path": model.path}
    if model.repo_id:
        described["model"] = model.repo_id
        described["model_revision"] = versions.weights_revision or model.revision
    else:
        described["model"] = ", ".join(file.name for file in model.files)
        described["model_revision"] = versions.weights_revision
    if versions.weights_origin:
        described["model_origin"] = versions.weights_origin
    if model.files and versions.weights_sha256:
        # Named single files are identified by their hashes; a repository checkout by its revision alone.
        described["model_sha256"] = dict(sorted(versions.weights_sha256.items()))
    return described


def run_metadata(profile: Profile, host_name: str, versions: RigVersions) -> dict[str, Any]:
    """Everything a reader of the result needs to know what was measured (copied into the result file)."""
    metadata: dict[str, Any] = {
        "profile": profile.name,
        # The engine recipe measured (engine.recipes; None: a profile without recipes): bench history by recipe.
        "recipe": profile.engine.recipe,
        "profile_hash": profile_hash(profile),
        "host": host_name,
        "gpus": f"{len(versions.gpus)}x {versions.gpus[0]}" if versions.gpus else "none",
        "driver_version": versions.driver_version,
        "cuda_driver_version": versions.cuda_driver_version,
        "kernel": versions.kernel,
        "cuda_toolkit": profile.cuda.version if profile.cuda else None,
        "engine_start": versions.engine_start,
    }
    metadata.update(engine_metadata(profile, versions))
    metadata.update(model_metadata(profile, versions))
    return metadata


def reasoning_parser(profile: Profile) -> bool:
    """Whether the engine splits a model's reasoning out of its answers (``--reasoning-parser`` in its flags)."""
    return profile.engine.flags.get("--reasoning-parser") not in (None, False)


def bench_config(profile: Profile, metadata: dict[str, Any], stop_on_wrong_output: bool = False) -> dict[str, Any]:
    """The client's config for this profile, checked by the client's own validator before it travels.

    + stop_on_wrong_output: measure no cell once a probe answered wrong (the recipes experiment)

    The main grid uses the completions endpoint for every engine: ``ignore_eos`` and ``usage`` behave the
    same there, and no chat template can add tokens the profile did not ask for. ``bench.extra_cells``
    measure other kinds beside it (chat, thinking on or off). The chat probes judge the answers of a
    chat-tuned model (``model.chat_tuned``), only the chat path of a base one; with thinking off and on
    where the engine runs a reasoning parser.
    """
    bench = profile.bench
    config = config_from_dict({
        "base_url": bench_base_url(profile),
        "model": profile.engine.served_model_name,
        "endpoint": "completions",
        "concurrency": list(bench.concurrency),
        "input_tokens": list(bench.input_tokens),
        "output_tokens": bench.output_tokens,
        "cell_seconds": bench.cell_seconds,
        "warmup_requests": bench.warmup_requests,
        "repeats": bench.repeats,
        "chat_probes": "answer" if profile.model.chat_tuned else "path",
        "reasoning_parser": reasoning_parser(profile),
        "extra_cells": [cells.model_dump() for cells in bench.extra_cells],
        "stop_on_wrong_output": stop_on_wrong_output,
        "metadata": metadata,
        # The client reads the key on the rig; it never travels in the config.
        "api_key_file": KEY_FILE if needs_api_key(profile) else None,
    })
    return config.as_dict()


def run_stamp(now: datetime) -> str:
    """A run's name: its UTC start time, sortable and safe in paths (``20261122T031455Z``)."""
    return now.strftime("%Y%m%dT%H%M%SZ")


def host_run_paths(stamp: str) -> HostRunPaths:
    """Where a run's config and result live on the rig."""
    base = PurePosixPath(HOST_RESULTS_DIR)
    return HostRunPaths(
        config=str(base / f"{stamp}.config.json"),
        result=str(base / f"{stamp}.json"),
        latest=str(base / HOST_LATEST_NAME),
    )


def results_root(environ: dict[str, str] | None = None) -> Path:
    """The controller's results folder: ``$RIGFORGE_RESULTS_DIR`` when set, else ``./results``."""
    value = (os.environ if environ is None else environ).get(RESULTS_DIR_VARIABLE) or DEFAULT_RESULTS_DIR
    return Path(value)


def controller_run_paths(root: Path, host_name: str, stamp: str) -> ControllerRunPaths:
    """Where a run's files land on the controller: ``<root>/<host>/<stamp>/``."""
    run_dir = root / host_name / stamp
    return ControllerRunPaths(
        run_dir=run_dir,
        result=run_dir / "result.json",
        summary=run_dir / "summary.md",
        plot=run_dir / "plot.png",
        latest_link=root / host_name / CONTROLLER_LATEST_NAME,
    )


def client_command(paths: HostRunPaths) -> str:
    """The shell command that runs the client on the rig and echoes its exit status after it.

    ``cd /`` keeps a stray ``rigforge`` folder in the login directory off ``sys.path``; unbuffered
    output lets each cell's progress line arrive as it is printed; ``--syslog`` puts the failure lines in the
    rig's journal, where the known-failure readers look, and ``journalctl --sync`` returns once journald has
    stored them (so the bench role's own read right after finds them; nothing happens without journald).
    """
    return (
        f"cd / && PYTHONPATH={shlex.quote(REMOTE_LIB_DIR)} PYTHONUNBUFFERED=1 python3 -m rigforge.bench "
        f"--config {shlex.quote(paths.config)} --out {shlex.quote(paths.result)} --syslog; status=$?; "
        f"journalctl --sync >/dev/null 2>&1; echo {EXIT_MARKER}$status"
    )


def latest_link_command(paths: HostRunPaths) -> str:
    """Point the rig's ``latest.json`` at this run's result (a relative link, replaced in one step)."""
    target = PurePosixPath(paths.result).name
    temporary = f"{paths.latest}.new"
    return (f"ln -sfn {shlex.quote(target)} {shlex.quote(temporary)} && "
            f"mv -Tf {shlex.quote(temporary)} {shlex.quote(paths.latest)}")


def parse_exit_status(lines: list[str]) -> int | None:
    """The client's exit status from the marker line ``client_command`` prints; None when it is missing.

    >>> parse_exit_status(["bench ok: 3/3 cells ok", "rigforge-bench-exit=0"])
    0
    """
    for line in reversed(lines):
        if line.startswith(EXIT_MARKER):
            value = line[len(EXIT_MARKER):].strip()
            return int(value) if value.isdigit() else None
    return None
