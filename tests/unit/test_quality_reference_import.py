"""Importing a reference made elsewhere (rigforge/quality/reference_import.py): the input checked field by field
before anything is written, another corpus version or tokenizer refused with the reason, the file written whole
with where it came from, an existing reference kept unless ``--replace``, and the report naming the imported
reference its verdicts used. The passes are tests/fixtures/quality/'s real llama.cpp passes, captured on the first
corpus (kjv-v1, kept beside them as corpus_kjv_v1.json): the import is checked against that corpus here."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from rigforge.quality import reference_import
from rigforge.quality.kld import compare_passes
from rigforge.quality.reference import against_block, load_corpus, load_reference, reference_path
from rigforge.quality.reference_import import RefusedImport, import_reference, key_of, main
from rigforge.recipes.report import build_report, report_markdown
from tests.unit.test_promises_recipe_report import CHAT, POLICY, measured, side_trial

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "quality"
KEY = key_of("gemma-3-270m-q4_k_m.gguf", "a5fd3b62230a")
NOW = datetime(2026, 11, 27, 9, 40, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def the_fixtures_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """The import checks a pass against the corpus its fixtures were captured on (the shipped one is newer)."""
    monkeypatch.setattr(reference_import, "load_corpus", lambda: load_corpus(FIXTURES / "corpus_kjv_v1.json"))


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def written(tmp_path: Path, name: str, data: Any) -> Path:
    path = tmp_path / "other" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def a_result(quality: dict[str, Any]) -> dict[str, Any]:
    """A bench result of another rig whose quality pass is ``quality`` (its metadata as rigforge writes it)."""
    return {"metadata": {"recipe": "bf16", "model": "org/gemma-3-270m-bf16", "model_revision": "r1",
                         "engine_start": "e1"}, "quality": quality, "cells": []}


def test_a_result_from_another_run_becomes_the_reference_with_where_it_came_from(tmp_path: Path) -> None:
    source = written(tmp_path, "run1/result.json", a_result(fixture("llamacpp_pass_default.json")))
    again = written(tmp_path, "run2/result.json", a_result(fixture("llamacpp_pass_default_restart.json")))
    results = tmp_path / "results"
    path, lines = import_reference(source, results, KEY, noise_from=again, now=NOW)
    assert path == reference_path(results, KEY) and [file.name for file in path.parent.iterdir()] == [path.name]
    stored = load_reference(results, KEY)
    assert stored is not None and stored["pass"] == fixture("llamacpp_pass_default.json")
    assert stored["recipe"] == "bf16" and stored["imported"]["checkpoint"] == "org/gemma-3-270m-bf16@r1"
    assert stored["imported"]["from"] == str(source) and stored["imported"]["at"] == "2026-11-27T09:40Z"
    expected = compare_passes(stored["pass"], fixture("llamacpp_pass_default_restart.json")).mean_kld
    assert stored["noise"]["mean_kld"] == expected and f"A/A noise: mean KLD {expected:.4f}" in lines
    assert lines[-1] == (f"wrote {path}: imported 2026-11-27T09:40Z from {source} (recipe bf16, checkpoint "
                         "org/gemma-3-270m-bf16@r1)")


@pytest.mark.parametrize(("change", "said"), [
    (lambda data: "{not json", "not a readable JSON file"),
    (lambda data: {"cells": []}, "neither a reference (an object with field 'pass')"),
    (lambda data: {"cells": [], "quality": None}, "field quality is null: that bench ran no quality pass"),
    (lambda data: {**data, "corpus": "kjv-v0"}, "field corpus is 'kjv-v0': another corpus version measures other "
                                                 "texts, so no pass here could be compared with it; allowed: 'kjv-v1'"),
    (lambda data: {**data, "method": "sampled"}, "field method is 'sampled'; allowed: 'greedy'"),
    (lambda data: {**data, "texts": []}, "field texts is missing or empty"),
    (lambda data: {**data, "texts": [{**data["texts"][0], "id": "gen-1"}]}, "field texts[0].id is 'gen-1'; allowed: "
                                                                             "one of the corpus's texts"),
    (lambda data: {**data, "texts": [{**data["texts"][0], "prompt_ids": ["a"]}]}, "field texts[0].prompt_ids"),
    (lambda data: {**data, "texts": [{**data["texts"][0], "steps": [{"token": 1, "top": [[1, 0.5]]}]}]},
     "field texts[0].steps[0].top is [[1, 0.5]]; allowed: a list of [token id, log-probability <= 0]"),
    (lambda data: {**data, "texts": [{**text, "steps": []} for text in data["texts"]]}, "no measured position"),
])
def test_bad_input_is_refused_naming_the_file_and_field_before_anything_is_written(
        tmp_path: Path, change: Any, said: str) -> None:
    source = written(tmp_path, "pass.json", change(fixture("llamacpp_pass_default.json")))
    with pytest.raises(RefusedImport, match="^" + str(source).replace(".", r"\.") + ": ") as refused:
        import_reference(source, tmp_path / "results", KEY)
    assert said in str(refused.value)
    assert not (tmp_path / "results").exists()


def test_a_reference_file_keeps_its_noise_and_a_result_under_quality_is_named_so(tmp_path: Path) -> None:
    reference = {"model": "org_gemma-bf16@r1", "recipe": "bf16", "run": "results/other/1", "engine_start": "e",
                 "pass": fixture("llamacpp_pass_default.json"), "noise": {"mean_kld": 0.0007}}
    path, _ = import_reference(written(tmp_path, "ref.json", reference), tmp_path / "results", KEY,
                               checkpoint="org/gemma-bf16@r1")
    assert json.loads(path.read_text())["noise"] == {"mean_kld": 0.0007}
    bad = a_result({**fixture("llamacpp_pass_default.json"), "corpus": None})
    with pytest.raises(RefusedImport, match="field quality.corpus is None"):
        import_reference(written(tmp_path, "bad/result.json", bad), tmp_path / "elsewhere", KEY)
    with pytest.raises(RefusedImport, match="field method is 'greedy' but the profile's engine measures 'forced'"):
        import_reference(written(tmp_path, "p.json", fixture("llamacpp_pass_default.json")), tmp_path / "x", KEY,
                         method="forced")


def test_a_tokenizer_mismatch_with_this_models_passes_here_is_refused(tmp_path: Path) -> None:
    results = tmp_path / "results"
    local = results / "sandbox-1" / "20261127T0900Z" / "result.json"
    local.parent.mkdir(parents=True)
    quality = {**fixture("llamacpp_pass_kv_q4.json"), "against_reference": {"reference": KEY}}
    local.write_text(json.dumps({"quality": quality}))
    other = copy.deepcopy(fixture("llamacpp_pass_default.json"))
    other["texts"][1]["prompt_ids"][5] += 1
    with pytest.raises(RefusedImport, match="refused, the tokenizer differs") as refused:
        import_reference(written(tmp_path, "other.json", other), results, KEY)
    assert str(local) in str(refused.value) and "text prov-6" in str(refused.value)
    assert "KLD needs the same vocabulary" in str(refused.value) and not (results / "references").exists()
    _, lines = import_reference(written(tmp_path, "same.json", fixture("llamacpp_pass_default.json")), results, KEY)
    assert f"tokenizer: the same prompt token ids as {local} (2 texts)" in lines


def test_an_existing_reference_is_replaced_only_with_the_switch_and_kept(tmp_path: Path, capsys: Any) -> None:
    results = tmp_path / "results"
    source = written(tmp_path, "p.json", fixture("llamacpp_pass_default.json"))
    args = [str(source), "--model", "gemma-3-270m-q4_k_m.gguf", "--revision", "a5fd3b62230a", "--results",
            str(results)]
    assert main(args) == 0 and reference_path(results, KEY).is_file()
    before = reference_path(results, KEY).read_text()
    assert main(args) == 2
    assert "a reference of gemma-3-270m-q4_k_m.gguf@a5fd3b62230a exists (imported " in capsys.readouterr().err
    assert reference_path(results, KEY).read_text() == before
    assert main([*args, "--replace", "--dry"]) == 0 and reference_path(results, KEY).read_text() == before
    assert main([*args, "--replace"]) == 0
    kept = [file for file in reference_path(results, KEY).parent.iterdir() if ".replaced-" in file.name]
    assert len(kept) == 1 and kept[0].read_text() == before
    assert json.loads(reference_path(results, KEY).read_text())["imported"]["replaced"].startswith("imported ")


def test_the_report_names_the_imported_reference_its_verdicts_used(tmp_path: Path) -> None:
    source = written(tmp_path, "p.json", fixture("llamacpp_pass_default.json"))
    path, _ = import_reference(source, tmp_path / "results", KEY, checkpoint="org/gemma-bf16@r1", now=NOW)
    reference = json.loads(path.read_text())
    candidates = {"default": "llamacpp_pass_default_restart.json", "kv-q4": "llamacpp_pass_kv_q4.json"}
    trials = []
    for name, file in candidates.items():
        passed = fixture(file)
        passed["against_reference"] = against_block(reference, KEY, compare_passes(reference["pass"], passed)
                                                    .as_dict(), 0.01)
        trials.append(side_trial(name, [{**result, "quality": passed} for result in measured(1.0, 1.0, CHAT)]))
    text = report_markdown(build_report(trials, "default", POLICY), "h", "s")
    assert (f"- reference: {KEY} (imported 2026-11-27T09:40Z from {source} (checkpoint org/gemma-bf16@r1))"
            in text)
    # Against an imported reference each recipe is judged relative to the start recipe's gap (its three starts
    # repeat bit for bit here: their spread, the A/A, is zero): the start is the same, kv-q4 moved past it.
    assert "- **default**: answers same in all 3 starts (mean KLD beyond the start recipe's +0.0000" in text
    assert "- **kv-q4**: answers differ in all 3 starts (mean KLD beyond the start recipe's +0.05" in text
