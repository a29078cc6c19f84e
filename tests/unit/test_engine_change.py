"""An engine change's planning: which moves are measured, what the plan line says, the build the unit runs, and
the record that names both builds (rigforge/updates/engine_change.py, rigforge/updates/record.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rigforge.profile.loader import load_profile
from rigforge.serving.engines import image_ref
from rigforge.updates.engine_change import EngineBuild, EngineChange, engine_plan_line, image_repository, unit_image
from rigforge.updates.record import ENGINE_UPDATES_DIR, UPDATES_DIR, UpdateRecord, apart_line, write_record
from rigforge.updates.sizing import Spread, plan_starts
from roles.engine_update import build_profile
from roles.service import render_unit

OLD = EngineBuild(package="xllamacpp==2026.10.11549")
NEW = EngineBuild(package="xllamacpp==2026.10.11549.0")
IMAGE_OLD = EngineBuild(image="rigforge/sglang:1111222233334444", commits={"SGLANG_REF": "a" * 40})
IMAGE_NEW = EngineBuild(image="rigforge/sglang:5555666677778888", commits={"SGLANG_REF": "b" * 40})


@pytest.mark.parametrize(("change", "measured", "words"), [
    (EngineChange(OLD, NEW, serving=True), True, "measured before and after"),
    (EngineChange(IMAGE_OLD, IMAGE_NEW, serving=True), True, "measured before and after"),
    (EngineChange(NEW, NEW, serving=True), False, "runs already; nothing to measure"),
    (EngineChange(None, NEW, serving=False), False, "a first install (no build before it)"),
    (EngineChange(OLD, NEW, serving=False), False, "the engine does not serve now"),
    (EngineChange(OLD, NEW, serving=True, recipe_switch=True), False, "deploys/recipes.py judges recipes"),
])
def test_only_a_serving_rig_moving_between_recorded_builds_is_measured(change: EngineChange, measured: bool,
                                                                       words: str) -> None:
    assert change.measured is measured
    assert words in change.reason()


def test_a_second_run_on_the_wanted_build_changes_nothing() -> None:
    again = EngineChange(IMAGE_NEW, EngineBuild(image=IMAGE_NEW.image, commits=IMAGE_NEW.commits), serving=True)
    assert not again.changes and not again.measured


def test_the_plan_line_names_both_builds_the_starts_their_minutes_and_the_resolution() -> None:
    profile = load_profile("sandbox")
    sized = plan_starts(profile, Spread(0.06, "assumed"))
    line = engine_plan_line(profile, EngineChange(OLD, NEW, serving=True), sized)
    assert line.startswith(f"plan: {sized.starts} starts on xllamacpp==2026.10.11549 and {sized.starts} on "
                           "xllamacpp==2026.10.11549.0 (bench.verdicts.starts is 3; more to resolve the tolerance) = "
                           "about 10 min (")
    assert "the move between them (no reboot); resolution: 6 vs 6 starts at a start-to-start spread of 6.0 %" in line


def test_a_built_image_is_named_with_its_commits() -> None:
    assert IMAGE_NEW.words() == f"rigforge/sglang:5555666677778888 (SGLANG_REF {'b' * 12})"
    assert OLD.words() == "xllamacpp==2026.10.11549"


def test_the_unit_names_the_image_it_runs_before_the_move() -> None:
    profile = load_profile("2x-pix")
    wanted = image_ref(profile)
    assert wanted is not None
    unit = render_unit(profile)  # the real unit text, rendered as the service role writes it
    assert unit_image(unit, wanted) == wanted
    other = f"{image_repository(wanted)}:0000000000000000"
    assert unit_image(unit, other) == wanted  # the unit still runs the old tag
    assert unit_image(unit, "someone/else:1") is None


def test_the_old_side_is_served_as_it_was() -> None:
    native = build_profile(load_profile("sandbox"), OLD)
    assert native.engine.native is not None and native.engine.native.package == OLD.package
    container = build_profile(load_profile("2x-pix"), IMAGE_OLD)
    assert container.engine.build is None and image_ref(container) == IMAGE_OLD.image


def _record(change: str) -> UpdateRecord:
    return UpdateRecord("rig", "20261127T0900Z", False, OLD.words(), NEW.words(), "b", "a", 30.0, 27.0, "worse",
                        "decode C=1 -10.0 %", change=change)


def test_an_engine_record_names_both_builds_and_keeps_out_of_the_driver_rollout(tmp_path: Path) -> None:
    record = _record("engine")
    assert record.report_lines()[0] == ("engine update on rig: xllamacpp==2026.10.11549 -> xllamacpp==2026.10.11549.0; "
                                        "decode C=1 30.0 -> 27.0 tok/s (-10.0 %); verdict: worse")
    path = write_record(tmp_path, record)
    assert path.parent == tmp_path / "rig" / ENGINE_UPDATES_DIR
    assert json.loads(path.read_text())["change"] == "engine"
    assert not (tmp_path / "rig" / UPDATES_DIR).exists()
    assert write_record(tmp_path, _record("driver")).parent == tmp_path / "rig" / UPDATES_DIR


def test_an_engine_change_runs_both_sides_in_one_boot() -> None:
    sides = [{"finished": "2026-11-27T09:00:00+00:00", "started": "2026-11-27T09:02:00+00:00"}] * 3
    line = apart_line(sides, sides, "engine")
    assert line.startswith("3 engine starts before and 3 after") and "in one boot" in line
    assert "reboot" in apart_line(sides, sides)
