"""A reference recorded with an older corpus or method is re-recorded by itself, the old one kept: no owner has to
find and delete ``results/references/<model>.json`` after an update of rigforge changed what a pass reads."""

from __future__ import annotations

import json
from pathlib import Path

from pyinfra.api import Config, Inventory, State
from pyinfra.api.state import StateStage

from rigforge.profile import Profile
from rigforge.profile.loader import load_profile
from rigforge.quality.reference import load_corpus, load_reference, outdated, reference_path, save_reference
from roles.quality import config_block, reference_key

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "quality"


def sandbox_rig(quality: dict) -> tuple[object, Profile]:
    data = load_profile("sandbox").model_dump(mode="json")
    data["bench"]["quality"].update(quality)
    inventory = Inventory((["@local"], {"rigforge_profile": data}))
    State(inventory, Config()).set_stage(StateStage.Prepare)
    return inventory.get_host("@local"), Profile.model_validate(data)


def test_a_reference_of_an_older_corpus_is_kept_aside_and_the_bench_records_a_new_one(tmp_path: Path) -> None:
    host, profile = sandbox_rig({"enabled": True})
    key = reference_key(host, profile)
    old_pass = json.loads((FIXTURES / "llamacpp_pass_default.json").read_text())  # corpus kjv-v1
    assert old_pass["corpus"] != load_corpus()["corpus"]
    save_reference(tmp_path, key, {"model": key, "recipe": "default", "pass": old_pass, "noise": None})
    block = config_block(host, profile, tmp_path, "20261202T1000Z")
    assert block is not None and block["reference_tokens"] is None  # nothing to follow: this pass records anew
    assert load_reference(tmp_path, key) is None
    retired = tmp_path / "references" / "retired" / f"{key}.20261202T1000Z.json"
    assert json.loads(retired.read_text())["pass"]["corpus"] == old_pass["corpus"]  # kept, never deleted


def test_a_current_or_imported_reference_stays_where_it_is(tmp_path: Path) -> None:
    host, profile = sandbox_rig({"enabled": True})
    key = reference_key(host, profile)
    current = {**json.loads((FIXTURES / "llamacpp_pass_default.json").read_text()), "corpus": load_corpus()["corpus"]}
    save_reference(tmp_path, key, {"model": key, "recipe": "default", "pass": current, "noise": None})
    assert config_block(host, profile, tmp_path, "20261202T1000Z")["reference_tokens"]  # type: ignore[index]
    imported = {"model": key, "recipe": "bf16", "imported": {"from": "/x.json"}, "pass": {**current, "corpus": "old"}}
    assert outdated(imported, load_corpus()["corpus"], "greedy") is None  # its refusal asks for a new import
    assert outdated({"pass": {**current, "method": "forced"}}, load_corpus()["corpus"], "greedy")
    assert reference_path(tmp_path, key).exists()


def test_quality_off_reads_no_reference(tmp_path: Path) -> None:
    host, profile = sandbox_rig({"enabled": False})
    assert config_block(host, profile, tmp_path, "20261202T1000Z") is None
