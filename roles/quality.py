"""The bench's quality pass on the controller side: what the rig is sent, and what its answer becomes.

Before a bench: the ``quality`` block of its config (rigforge/quality/reference.py), with the reference's tokens
when one is stored. After it: the pass is compared with the model's reference (rigforge/quality/kld.py) and the
comparison written into the result (``quality.against_reference``), which the recipe report's veto and the
driver update read. The first pass of the reference recipe records the reference; the next pass of the same
recipe in another engine start records its A/A noise: right after recording, the engine is restarted once (the
rigforge unit, nothing of the owner's) and the pass measured again. Called by roles/bench.py's ``measure``.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

from pyinfra import logger
from pyinfra.api import Host

from rigforge.bench.quality import METHODS
from rigforge.bench_runs.plan import bench_base_url
from rigforge.profile import Profile
from rigforge.quality.judge import DIFFER, judge_quality
from rigforge.quality.kld import compare_passes
from rigforge.quality.over_starts import judge_over_starts
from rigforge.quality.reference import (
    against_block,
    load_corpus,
    load_reference,
    model_key,
    outdated,
    quality_config,
    retire_reference,
    save_reference,
)
from rigforge.quality.tasks import compare_scores, grade_answered
from rigforge.serving.engines import UNIT_NAME
from rigforge.updates.history import load_result
from rigforge.updates.record import UpdateRecord, write_record
from rigforge.updates.verdict import WORSE


def base_of(host: Host) -> Profile:
    """The rig's profile as the inventory gives it, no recipe laid over it (the reference's recipe is applied to
    this, never to another recipe's overlay)."""
    return Profile.model_validate(host.data.get("rigforge_profile"))


def reference_recipe(host: Host, profile: Profile) -> str | None:
    """The recipe whose answers are the model's reference (None: a profile without recipes)."""
    return profile.bench.quality.reference_recipe or base_of(host).engine.recipe


def reference_key(host: Host, profile: Profile) -> str:
    """The reference's key: the reference recipe's model and revision, whatever checkpoint ``profile`` serves."""
    base = base_of(host)
    recipe = reference_recipe(host, profile)
    return model_key((base.with_recipe(recipe) if recipe else base).model)


def config_block(host: Host, profile: Profile, results_dir: Path, stamp: str) -> dict[str, Any] | None:
    """The bench config's ``quality`` block for ``profile`` (None: quality off). A reference recorded here with an
    older corpus or method is moved aside first (``retire_reference``): no pass could be compared with it, and this
    bench, or the next of the reference recipe, records the model's reference anew.

    + stamp: the bench run's stamp (names a retired reference)
    """
    if not profile.bench.quality.enabled:
        return None
    key = reference_key(host, profile)
    reference = load_reference(results_dir, key)
    why = reference and outdated(reference, load_corpus()["corpus"], METHODS[profile.engine.kind])
    if reference is not None and why:
        retired = retire_reference(results_dir, key, stamp)
        host.log(f"quality: the reference of {key} was {why}: kept as {retired}; the next bench of recipe "
                 f"{reference_recipe(host, profile)} records it anew", logger.warning)
        reference = None
    return quality_config(profile.bench.quality, profile.engine.kind, reference)


def engine_start(host: Host, connector: dict[str, Any]) -> str:
    """The engine unit's current InvocationID: which start of the engine the pass measured."""
    ok, output = host.run_shell_command(f"systemctl show -p InvocationID --value {UNIT_NAME}", **connector)
    return output.stdout_lines[0].strip() if ok and output.stdout_lines else ""


def record_against_reference(host: Host, profile: Profile, results_dir: Path, result: dict[str, Any],
                             result_path: Path, connector: dict[str, Any]) -> None:
    """Compare the result's pass with the reference (recording the reference, or its noise, where due), write
    the comparison into the result and its file, and log the line."""
    passed = result.get("quality")
    if not passed:
        return
    if passed.get("task_score") and "score" not in passed["task_score"]:
        passed["task_score"]["score"] = grade_answered(passed["task_score"])
    key, recipe = reference_key(host, profile), profile.engine.recipe
    is_reference_recipe = recipe == reference_recipe(host, profile)
    reference = load_reference(results_dir, key)
    start = engine_start(host, connector)
    if reference is None:
        if not is_reference_recipe:
            passed["against_reference"] = {"refused": f"no reference for {key} yet (it is recorded by the first "
                                                      f"bench of recipe {reference_recipe(host, profile)})"}
        else:
            save_reference(results_dir, key, {"model": key, "recipe": recipe, "run": str(result_path.parent),
                                              "engine_start": start, "pass": passed, "noise": None})
            passed["against_reference"] = {"recorded": True, "reference": key}
    else:
        measured = compare_passes(reference["pass"], passed)
        # An imported reference's noise is its own run's: a pass here against it measures the checkpoints' gap.
        if (is_reference_recipe and reference.get("noise") is None and not reference.get("imported") and start
                and start != reference.get("engine_start") and measured.refused is None):
            reference["noise"] = {**measured.as_dict(), "run": str(result_path.parent), "engine_start": start}
            save_reference(results_dir, key, reference)
            host.log(f"quality: the A/A noise of {key}'s reference recorded (another engine start): mean KLD "
                     f"{measured.mean_kld:.4f}", logger.info)
        passed["against_reference"] = against_block(reference, key, measured.as_dict(),
                                                    profile.bench.quality.max_mean_kld)
        if passed.get("task_score"):
            passed["against_reference"]["task_score"] = compare_scores(
                (reference["pass"].get("task_score") or {}).get("score"), passed["task_score"]["score"],
                profile.bench.quality.task_score.max_drop_points)
    temporary = result_path.with_name(result_path.name + ".tmp")
    temporary.write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    os.replace(temporary, result_path)
    line = (f"quality: reference of {key} recorded from recipe {recipe}" if passed["against_reference"].get(
        "recorded") else judge_quality(passed).line)
    host.log(f"{line} (pass: {passed.get('seconds', 0):.1f} s, {passed.get('requests')} requests)"
             f"{score_note(passed.get('task_score'))}", logger.info)


def score_note(answered: dict[str, Any] | None) -> str:
    """``; task score 91.3 % [87.6, 94.0] of 300 in 95.2 s`` (the run's own score and its cost), or nothing."""
    score = (answered or {}).get("score")
    if not score:
        return ""
    if score.get("refused"):
        return f"; task score refused: {score['refused']}"
    return (f"; task score {score['percent']:.1f} % [{score['interval'][0]:.1f}, {score['interval'][1]:.1f}] of "
            f"{score['total']} in {score['seconds']:.1f} s")


def recorded_now(result: dict[str, Any]) -> bool:
    """Whether this result's pass was just recorded as the model's reference (its A/A is still to measure)."""
    return bool(((result.get("quality") or {}).get("against_reference") or {}).get("recorded"))


def restart_engine(host: Host, profile: Profile, connector: dict[str, Any]) -> bool:
    """Restart the engine unit and wait until it answers /health (another start, for the reference's A/A)."""
    probe = shlex.quote(f"import urllib.request; urllib.request.urlopen('{bench_base_url(profile)}/health', "
                        "timeout=2)")
    wait = profile.engine.health_timeout_s
    host.log(f"quality: restarting {UNIT_NAME} once to measure the new reference's A/A noise in another start")
    ok, _ = host.run_shell_command(
        f"systemctl restart {UNIT_NAME} && for i in $(seq 1 {wait}); do python3 -c {probe} 2>/dev/null && exit 0; "
        "sleep 1; done; exit 1", **connector)
    if not ok:
        host.log(f"quality: {UNIT_NAME} did not answer /health within {wait} s of its restart; the reference's "
                 "A/A noise is measured by its next bench", logger.warning)
    return bool(ok)


def quality_regression(root: Path, record: UpdateRecord) -> UpdateRecord:
    """A measured change's record (driver update, engine build) made a regression when its answers after the
    change differ from the model's reference over every after-start and the baseline's did not
    (rigforge/quality/over_starts.py, the tournaments' rule); written again when it changes.

    + root: the controller's results folder
    + record: the update's record as its speed comparison wrote it
    """
    baselines = [load_result(Path(run)) for run in record.baselines or [record.baseline]]
    # Against an imported reference both sides sit at the checkpoints' gap: the after-starts are judged relative to
    # the baseline's (rigforge/quality/over_starts.py); against a recorded one the baseline changes nothing.
    after = judge_over_starts([load_result(Path(run)) for run in record.afters or [record.after]],
                              baseline_starts=baselines)
    before = judge_over_starts(baselines, baseline_starts=baselines)
    if after.state != DIFFER or before.state == DIFFER:
        return record
    changed = replace(record, verdict=WORSE, summary=f"{after.line}; speed: {record.summary}")
    write_record(root, changed)
    return changed
