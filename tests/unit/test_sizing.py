"""A measured change's k, chosen before it measures, and what its starts resolve: said in the plan, kept in the
record; "cannot tell" stops the rollout unless the owner lets it go on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rigforge.bench_runs.starts import judged_profile, judged_start_seconds, side_seconds, start_seconds
from rigforge.profile import Profile
from rigforge.profile.loader import load_profile
from rigforge.updates import rollout as rollout_module
from rigforge.updates.record import (
    CANNOT_TELL_WORDS,
    UpdateRecord,
    last_spread,
    measured_key,
    records_since,
    write_record,
)
from rigforge.updates.rollout import row_for
from rigforge.updates.sizing import (
    Spread,
    assumed_spread,
    plan_line,
    plan_starts,
    pooled_spread,
    primary_alpha,
    resolution_at,
    resolving_starts,
)
from rigforge.updates.verdict import CANNOT_TELL, SAME, WORSE


def _with(profile: Profile, tolerance: float | None = None, budget: int | None = None,
          concurrency: list[int] | None = None) -> Profile:
    bench = profile.bench
    if tolerance is not None:
        bench = bench.model_copy(update={"regression_tolerance": [
            rule.model_copy(update={"max_worse_percent": tolerance}) for rule in bench.regression_tolerance[:1]]})
    if concurrency is not None:
        bench = bench.model_copy(update={"concurrency": concurrency})
    update = profile.driver_update if budget is None else profile.driver_update.model_copy(
        update={"starts_budget_s": budget})
    return profile.model_copy(update={"bench": bench, "driver_update": update})


def test_k_grows_from_the_floor_to_resolve_the_tolerance_within_the_budget() -> None:
    sandbox = load_profile("sandbox")  # 5 % on decode at C=1; a start about 50 s; 600 s for both sides
    assert assumed_spread(sandbox) == Spread(0.06, "assumed: driver_update.assumed_spread_percent 6 %")
    capped = plan_starts(sandbox, Spread(0.06, "assumed"))
    assert (capped.starts, capped.capped) == (6, True) and capped.seconds == 2 * side_seconds(sandbox, 6) <= 600
    assert capped.needed == resolving_starts(sandbox, 0.06) and capped.needed > 20  # 5 % inside a 6 % spread
    assert not capped.resolution.resolves
    roomy = plan_starts(_with(sandbox, budget=10**6), Spread(0.02, "measured"))
    assert roomy.starts == roomy.needed > 3 and not roomy.capped and roomy.resolution.resolves
    wide = plan_starts(_with(sandbox, tolerance=40.0), Spread(0.06, "assumed"))
    assert (wide.starts, wide.capped) == (3, False)  # bench.verdicts.starts is the floor
    assert plan_starts(_with(sandbox, tolerance=50.0), Spread(0.06, "assumed")).starts == 3  # 2 x 50 %: sized at 99 %
    assert plan_starts(_with(sandbox, budget=0), Spread(0.06, "assumed")).starts == 3  # never below the floor


def test_the_plan_line_says_k_minutes_and_the_resolution() -> None:
    sandbox = load_profile("sandbox")
    line = plan_line(sandbox, plan_starts(sandbox, Spread(0.06, "assumed")), "before", "after", "one reboot")
    assert line.startswith("plan: 6 starts before and 6 after (bench.verdicts.starts is 3; more to resolve the "
                           "tolerance) = about 10 min (")
    assert "resolution: 6 vs 6 starts at a start-to-start spread of 6.0 %: a loss of " in line
    assert "or more is called worse, \"same\" needs a tolerance of ±" in line and "(80 % power; tolerance 5 %)" in line
    assert "more than driver_update.starts_budget_s affords" in line and "engine starts" not in line


def test_the_primary_spends_half_the_false_claim_rate_when_other_metrics_are_judged() -> None:
    sandbox = load_profile("sandbox")
    assert primary_alpha(sandbox) == 0.025
    one = _with(sandbox, tolerance=40.0, concurrency=[1])  # one cell, one rule: the primary alone
    assert primary_alpha(one) == 0.05


def test_later_starts_bench_only_the_cells_a_rule_judges() -> None:
    sandbox = load_profile("sandbox")
    assert judged_profile(sandbox) is sandbox  # decode is judged in every cell
    only_c1 = sandbox.model_copy(update={"bench": sandbox.bench.model_copy(update={"regression_tolerance": [
        rule for rule in sandbox.bench.regression_tolerance if rule.concurrency == 1]})})
    narrowed = judged_profile(only_c1)
    assert narrowed.bench.concurrency == [1] and narrowed.bench.input_tokens == [128]
    assert judged_start_seconds(only_c1) < start_seconds(only_c1)
    assert side_seconds(only_c1, 3) == start_seconds(only_c1) + 2 * judged_start_seconds(only_c1)


def test_the_spread_is_pooled_about_each_side_and_read_from_the_last_record(tmp_path: Path) -> None:
    assert pooled_spread([100.0, 100.0], [50.0, 50.0]) == 0.0  # a change between the sides is not spread
    assert pooled_spread([100.0], [50.0]) is None
    sandbox = load_profile("sandbox")
    assert last_spread(tmp_path, "rig-a", sandbox) == assumed_spread(sandbox)
    write_record(tmp_path, _record(started="20261123T040000Z", spread=0.031))
    write_record(tmp_path, _record(started="20261123T050000Z", spread=None))
    spread = last_spread(tmp_path, "rig-a", sandbox)
    assert spread.value == 0.031 and spread.source == "measured in the rig-a update of 20261123T040000Z"
    # A rig that measured none yet sizes by the fleet's newest spread of the same primary and model.
    write_record(tmp_path, _record(host="rig-c", started="20261123T060000Z", spread=0.05, measured="other model"))
    assert last_spread(tmp_path, "rig-b", sandbox).source == "measured in the rig-a update of 20261123T040000Z"
    write_record(tmp_path, _record(host="rig-c", started="20261123T070000Z", spread=0.04,
                                   measured=measured_key(sandbox)))
    assert last_spread(tmp_path, "rig-b", sandbox) == Spread(0.04, "measured in the rig-c update of 20261123T070000Z")
    assert resolution_at(sandbox, 3, 3, 0.031).smallest_worse > resolution_at(sandbox, 8, 8, 0.031).smallest_worse


def _record(**changes: object) -> UpdateRecord:
    fields: dict = {"host": "rig-a", "started": "20261123T040000Z", "rollback": False, "driver_before": "590.48.01",
                    "driver_after": "595.45.04", "baseline": "b", "after": "a", "decode_before": 60.0,
                    "decode_after": 57.0, "verdict": SAME, "summary": "same: decode",
                    "resolution": "resolution: 3 vs 3 starts at a start-to-start spread of 4.0 %: ..."}
    return UpdateRecord(**{**fields, **changes})


def test_cannot_tell_is_no_pass_and_says_its_resolution() -> None:
    undecided = _record(verdict=CANNOT_TELL)
    assert undecided.undecided and undecided.stops and not undecided.ok and not undecided.regressed
    assert undecided.report_lines()[-2:] == [undecided.resolution, CANNOT_TELL_WORDS]
    went_on = _record(verdict=CANNOT_TELL, went_on=True)
    assert went_on.ok and not went_on.stops and "on_cannot_tell=continue" in went_on.report_lines()[-1]
    assert _record(verdict=WORSE).stops and _record().ok
    row = row_for("rig-a", [undecided], "595.45.04", failed=True)
    assert row.verdict == ("cannot tell at this resolution: stopped; 3 vs 3 starts at a start-to-start spread of "
                           "4.0 %: ...")


@pytest.mark.parametrize(("verdict", "went_on", "stopped_at"), [
    (CANNOT_TELL, False, "rig-b"), (CANNOT_TELL, True, None), (SAME, False, None)])
def test_the_rollout_stops_at_a_rig_that_cannot_tell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      verdict: str, went_on: bool, stopped_at: str | None) -> None:
    inventory = tmp_path / "inventory.py"
    inventory.write_text("rigs = [(name, {'rigforge_profile': {'driver': {'version': '595.45.04'}}}) "
                         "for name in ('rig-a', 'rig-b', 'rig-c')]\n")
    monkeypatch.setenv("RIGFORGE_RESULTS_DIR", str(tmp_path / "results"))
    updated: list[str] = []

    def run_batch(inventory: Path, deploy: str, names: list[str], data: list[str]) -> int:
        """The deploy's part here: each rig's record (rig-b's with the verdict under test)."""
        for name in names:
            updated.append(name)
            write_record(tmp_path / "results", _record(host=name, started="29991231T000000Z",
                                                       verdict=verdict if name == "rig-b" else SAME,
                                                       went_on=went_on and name == "rig-b"))
        return 1 if verdict == CANNOT_TELL and not went_on and "rig-b" in names else 0

    monkeypatch.setattr(rollout_module, "run_batch", run_batch)
    rows, passed = rollout_module.rollout(inventory, 1, [])
    assert passed == (stopped_at is None)
    assert updated == (["rig-a", "rig-b"] if stopped_at else ["rig-a", "rig-b", "rig-c"])
    if stopped_at:
        assert rows[-1].verdict == "untouched (stopped at rig-b)" and "stopped" in rows[1].verdict
    assert records_since(tmp_path / "results", "rig-b", "0")[0].verdict == verdict
    assert json.loads(next((tmp_path / "results" / "rig-b" / "updates").glob("*.json")).read_text())["went_on"] == (
        went_on)


def test_the_monitoring_sees_a_change_that_could_not_tell(tmp_path: Path) -> None:
    from rigforge.remote import health_metrics
    from roles.measured_change import change_state

    path = tmp_path / "measured-change.json"
    assert health_metrics.change_samples(str(path)) == []  # no change measured yet: no sample
    path.write_text(change_state(_record(verdict=CANNOT_TELL, went_on=True)))
    assert health_metrics.change_samples(str(path)) == [
        ("rigforge_measured_change_cannot_tell", {"change": "driver", "verdict": CANNOT_TELL}, 1.0)]
    path.write_text(change_state(_record()))
    assert health_metrics.change_samples(str(path))[0][2] == 0.0
    assert "rigforge_measured_change_cannot_tell" in health_metrics.HELP
