"""Bench role: the smoke benchmark, run on the rig against its own engine, judged on the controller.

Two kinds of work, treated differently on purpose:

- **State**: the client's code under ``/opt/rigforge/lib/rigforge`` and the results folder
  ``/var/lib/rigforge/bench``. Managed files and folders like any other role's: a second run plans
  nothing, ``--dry --diff`` shows every line that would change.
- **Measurement**: running the client. A benchmark is not state to converge; it is evidence taken
  each time a deploy executes. ``smoke_benchmark`` therefore yields its command only while pyinfra
  *executes* (``state.is_executing``): when pyinfra plans (``--dry``, and the change detection
  before a real run) it yields nothing, so ``pyinfra … --dry --json`` lists no change for it and the
  "second run plans zero changes" gate holds, while every real run measures afresh. A real run
  reports the op as executed, which is true: it measured.

At run time the op reads the rig's versions from facts (driver, CUDA, engine image, weights
manifest), writes the run's config, runs ``python3 -m rigforge.bench`` with the client's per-cell
progress streamed into pyinfra's output, links ``latest.json``, downloads the raw JSON to
``results/<host>/<stamp>/`` with ``summary.md`` and ``plot.png``, prints the table and the verdict
against the profile's floors, and fails the deploy when the client exits non-zero or the verdict fails. A
failed bench then names the known failures the engine journal, kernel log and its own failure lines (the
client sends them to the journal) show in its window: a MoE tile fallback explains a slow rig, a served chat
template that is not the model's explains leaked turn markers.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from io import StringIO
from pathlib import Path, PurePosixPath
from typing import Any

from pyinfra import host, logger, state
from pyinfra.api import FunctionCommand, StringCommand, deploy, operation
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS
from pyinfra.api.host import Host
from pyinfra.api.state import State
from pyinfra.facts.server import Command, KernelVersion
from pyinfra.operations import files

from rigforge.bench.config import config_from_dict
from rigforge.bench_runs.plan import (
    HOST_RESULTS_DIR,
    RESULT_WRITTEN,
    ControllerRunPaths,
    RigVersions,
    bench_base_url,
    bench_config,
    client_command,
    controller_run_paths,
    host_run_paths,
    latest_link_command,
    library_dirs,
    library_files,
    parse_exit_status,
    results_root,
    run_metadata,
    run_stamp,
)
from rigforge.bench_runs.report import Verdict, judge, render_markdown, render_plot
from rigforge.checks.known_failures import find_known_failures
from rigforge.context import current_profile
from rigforge.facts.gpu import NvidiaGpus
from rigforge.facts.images import DockerImageId
from rigforge.facts.logs import FailureLogs, KnownFailureLogs
from rigforge.facts.weights import WeightsOnDisk
from rigforge.fleet.image_commits import rig_git_refs
from rigforge.known_failures import hit_line
from rigforge.operations.files import managed_file
from rigforge.operations.reboot import loaded_driver_version
from rigforge.profile import Profile
from rigforge.render import render
from rigforge.serving.engines import REMOTE_LIB_DIR, image_ref
from roles import quality
from roles.service import ENGINE_START_ID, fresh_start


@deploy("Bench")
def apply_bench(profile: Profile | None = None) -> None:
    """Install the client, keep the results folder, and measure the engine (only when the deploy executes).

    + profile: the profile served (default: the current host's, with the recipe this run gives it)
    """
    profile = profile or current_profile()
    install_client(profile)
    smoke_benchmark(
        name=f"Smoke benchmark against {bench_base_url(profile)}",
        profile=profile,
        results_dir=str(results_root()),
    )


def install_client(profile: Profile) -> None:
    """The client's code under /opt/rigforge/lib and the rig's results folder (managed: a second run plans nothing)."""
    for folder in host.loop(["/opt/rigforge", *library_dirs(), "/var/lib/rigforge", HOST_RESULTS_DIR]):
        files.directory(name=f"Create {folder}", path=folder, mode="755", user="root", group="root")
    for remote_path, source in host.loop(sorted(library_files().items())):
        managed_file(
            name=f"Install {remote_path}",
            dest=remote_path,
            content=render_library_file(profile, remote_path, source),
        )


def render_library_file(profile: Profile, remote_path: str, source: str) -> str:
    """One client module as installed: the managed-by header, then the source unchanged."""
    source_name = PurePosixPath(remote_path).relative_to(REMOTE_LIB_DIR).as_posix()
    return render("bench/client-module.py.j2", profile, source=source, source_name=source_name,
                  lib_dir=REMOTE_LIB_DIR)


def bench_starts(profile: Profile, where: str, results: Path) -> None:
    """``bench.verdicts.starts`` engine starts, each restarted, waited for until healthy and benched: repeats inside
    a start see only that start; the starts show how much a start alone moves the numbers (roles/driver_update.py).

    + profile: the profile served
    + where: what the operations' names add (e.g. "on driver 595.45.04")
    + results: the controller's results folder
    """
    starts = profile.bench.verdicts.starts
    for number in range(1, starts + 1):
        fresh_start(profile, f"start {number} of {starts} {where}")
        smoke_benchmark(name=f"Bench start {number} of {starts} {where}", profile=profile, results_dir=str(results))


@operation(is_idempotent=False)
def smoke_benchmark(profile: Profile, results_dir: str):
    """
    Run the smoke benchmark on the rig and judge it; plans nothing, measures when the deploy executes.

    + profile: the host's profile (bench workload, floors, engine address)
    + results_dir: the controller folder that receives ``<host>/<stamp>/`` (default ``./results``)

    **Example:**

    .. code:: python

        smoke_benchmark(name="Smoke benchmark", profile=current_profile(), results_dir="results")
    """
    if not state.is_executing:
        host.noop("the benchmark measures when the deploy executes; planning never measures")
        return
    arguments = host.current_op_global_arguments or {}
    connector = {key: value for key, value in arguments.items() if key in CONNECTOR_ARGUMENT_KEYS}
    yield FunctionCommand(run_smoke_benchmark, (profile, Path(results_dir), connector), {})


def read_versions(bench_host: Host, profile: Profile) -> RigVersions:
    """The rig's versions as its facts give them now (after every earlier role of this deploy ran)."""
    gpus = bench_host.get_fact(NvidiaGpus)
    weights = bench_host.get_fact(WeightsOnDisk, path=profile.model.path)
    image = image_ref(profile)
    manifest = weights.manifest
    return RigVersions(
        # nvidia-smi's XML names the driver; without it, the loaded module's version (same fact as the reboot's).
        driver_version=gpus.driver_version or loaded_driver_version(bench_host),
        cuda_driver_version=gpus.cuda_version,
        kernel=bench_host.get_fact(KernelVersion),
        gpus=tuple(gpu.name for gpu in gpus.gpus),
        image=image,
        image_id=bench_host.get_fact(DockerImageId, ref=image) if image else None,
        image_git_refs=rig_git_refs(bench_host, profile) if profile.engine.build is not None else {},
        weights_revision=manifest.revision if manifest else None,
        weights_origin=manifest.origin if manifest else None,
        weights_sha256={entry.name: entry.sha256 for entry in manifest.files} if manifest else {},
        engine_start=bench_host.get_fact(Command, command=ENGINE_START_ID) or None,
    )


@dataclass(frozen=True)
class Measured:
    """One run of the client on the rig, its result brought to the controller (None: the client wrote none)."""

    stamp: str
    exit_status: int | None
    result: dict[str, Any] | None
    local: ControllerRunPaths


def measure(host: Host, profile: Profile, results_dir: Path, connector: dict[str, Any],
            stop_on_wrong_output: bool = False, quality_only: bool = False) -> Measured:
    """Run the client on the rig against ``profile``'s engine and download its result (``results/<host>/<stamp>``).

    + host: the rig
    + profile: what it serves (its recipe is in the result's metadata)
    + results_dir: the controller's results folder
    + connector: the operation's connector arguments (sudo…)
    + stop_on_wrong_output: measure no cell once a probe answered wrong
    + quality_only: only the quality pass (the reference's A/A in another engine start), kept out of the bench
      history (``results/references/runs/``)
    """
    stamp = run_stamp(datetime.now(timezone.utc))
    paths = host_run_paths(stamp)
    local = controller_run_paths(results_dir / "references" / "runs" if quality_only else results_dir, host.name,
                                 stamp)
    config = bench_config(profile, run_metadata(profile, host.name, read_versions(host, profile)),
                          stop_on_wrong_output)
    config.update(quality=quality.config_block(host, profile, results_dir, stamp), quality_only=quality_only)  # checked
    if not host.put_file(StringIO(json.dumps(config, indent=1) + "\n"), paths.config, **connector):
        host.log(f"bench: could not write {paths.config}", logger.error)
        return Measured(stamp, None, None, local)
    cells = sum(len(levels) * len(lengths) for _, levels, lengths in config_from_dict(config).cell_grids())
    host.log(f"bench: {cells} cells of {config['cell_seconds']:g} s against {config['base_url']} (run {stamp})")
    _, output = host.run_shell_command(StringCommand(client_command(paths)), print_output=True, **connector)
    exit_status = parse_exit_status(output.stdout_lines)
    if exit_status not in RESULT_WRITTEN:
        host.log(f"bench FAILED on {host.name}: the client exited {exit_status} without a result "
                 f"(config {paths.config}):\n" + "\n".join(output.stderr_lines[-20:]), logger.error)
        return Measured(stamp, exit_status, None, local)
    if not quality_only:
        host.run_shell_command(StringCommand(latest_link_command(paths)), **connector)
    local.run_dir.mkdir(parents=True, exist_ok=True)
    if not host.get_file(paths.result, str(local.result), **connector):
        host.log(f"bench FAILED on {host.name}: could not download {paths.result}", logger.error)
        return Measured(stamp, exit_status, None, local)
    result = json.loads(local.result.read_text())
    quality.record_against_reference(host, profile, results_dir, result, local.result, connector)
    if quality.recorded_now(result) and quality.restart_engine(host, profile, connector):
        measure(host, profile, results_dir, connector, quality_only=True)  # the new reference's A/A noise
    return Measured(stamp, exit_status, result, local)


def run_smoke_benchmark(
    state: State, host: Host, profile: Profile, results_dir: Path, connector: dict[str, Any]
) -> bool:
    """Run the client on the rig, bring its result home, report it; False fails the operation."""
    del state  # pyinfra passes it; the host carries everything needed here
    measured = measure(host, profile, results_dir, connector)
    result, local = measured.result, measured.local
    if result is None:
        return False
    verdict = judge(result, profile.bench.floors)
    write_reports(result, verdict, local)
    for line in (render_markdown(result) + "\n" + verdict.render()).splitlines():
        host.log(line)
    passed = measured.exit_status == 0 and verdict.passed
    host.log(outcome_line(host.name, result, verdict, passed, local.run_dir),
             logger.info if passed else logger.error)
    if not passed:
        window = f"{datetime.strptime(measured.stamp, '%Y%m%dT%H%M%SZ'):%Y-%m-%d %H:%M:%S} UTC"
        for line in known_failure_lines(host.get_fact(KnownFailureLogs, since=window), window):
            host.log(line, logger.error)
    return passed


def known_failure_lines(logs: FailureLogs, window: str) -> list[str]:
    """Why a bench may have failed, from the logs of its window: one line per known failure (or that none is).

    + logs: the KnownFailureLogs fact read over the bench window (engine journal, kernel log, bench lines)
    + window: the window's start, as given to journalctl

    Example: a tile fallback in the journal gives ``bench: known failure moe-tile-fallback (warn): ...``.
    """
    hits = find_known_failures(logs)
    if not hits:
        return [f"bench: no known failure in the engine journal, kernel log or bench lines since {window}"]
    return [f"bench: {hit_line(hit)} (seen: {hit.line})" for hit in hits]


def write_reports(result: dict[str, Any], verdict: Verdict, local: ControllerRunPaths) -> None:
    """``summary.md`` (table and verdict) and ``plot.png`` beside ``result.json``; move ``latest`` to this run."""
    local.summary.write_text(render_markdown(result) + "\n## Verdict\n\n```\n" + verdict.render() + "\n```\n")
    render_plot(result, local.plot)
    point_latest(local)


def point_latest(local: ControllerRunPaths) -> None:
    """Make ``<root>/<host>/latest`` a relative link to this run's folder, replaced in one step."""
    temporary = local.latest_link.with_name(local.latest_link.name + ".new")
    if temporary.is_symlink() or temporary.exists():
        temporary.unlink()
    temporary.symlink_to(local.run_dir.name, target_is_directory=True)
    os.replace(temporary, local.latest_link)


def outcome_line(host_name: str, result: dict[str, Any], verdict: Verdict, passed: bool, run_dir: Path) -> str:
    """The one-line summary: pass/fail, what failed by name, and where the files are."""
    cells = result.get("cells", [])
    ok_cells = sum(1 for cell in cells if cell.get("status") == "ok")
    head = f"bench {'PASS' if passed else 'FAIL'} on {host_name}: {ok_cells}/{len(cells)} cells ok"
    failed = list(result.get("failed_checks") or [])
    failed += [line.name for line in verdict.lines if not line.passed and line.name.startswith("floor")]
    if failed:
        head += f", failed: {', '.join(failed[:8])}" + (" …" if len(failed) > 8 else "")
    return f"{head}; results in {run_dir}"
