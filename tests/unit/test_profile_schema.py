"""The profile's JSON Schema: current with the models, true to every shipped profile file, and as strict as the
loader on one file (unknown keys, wrong types, values out of range); the settings page current with it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from rigforge.profile.comments import REGENERATE, Notes, yaml_comments
from rigforge.profile.json_schema import MODELINE, SCHEMA_FILE, check_files, layer_schema, schema_text
from rigforge.profile.loader import PROFILES_DIR, ProfileError, load_profile
from rigforge.profile.settings_page import SETTINGS_PAGE, settings_page

SCHEMA = json.loads(SCHEMA_FILE.read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
PROFILE_FILES = sorted(PROFILES_DIR.glob("*.yaml"))


def test_committed_schema_is_what_the_models_write() -> None:
    assert schema_text() == SCHEMA_FILE.read_text(), f"{SCHEMA_FILE.name} is stale: run `{REGENERATE}`"


def test_settings_page_is_what_the_schema_and_comments_write() -> None:
    notes = Notes.read()
    assert settings_page(layer_schema(notes), notes) == SETTINGS_PAGE.read_text(), (
        f"docs/settings.md is stale: run `{REGENERATE}`")


def test_the_schema_is_a_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("path", PROFILE_FILES, ids=lambda path: path.name)
def test_every_shipped_profile_file_passes_the_schema(path: Path) -> None:
    errors = [f"{'.'.join(map(str, error.absolute_path))}: {error.message}"
              for error in VALIDATOR.iter_errors(yaml.safe_load(path.read_text()))]
    assert not errors, errors


@pytest.mark.parametrize("path", PROFILE_FILES, ids=lambda path: path.name)
def test_every_profile_file_names_the_schema_first(path: Path) -> None:
    assert path.read_text().splitlines()[0] == MODELINE


# --- one bad file: the schema and the loader both refuse it -------------------------------------------------

BAD_LAYERS = [
    # (what the file sets over sandbox.yaml, where the schema refuses it, what the loader says)
    # the three of the acceptance: an unknown key, a wrong type, a port out of range
    ({"engine": {"prot": 8000}}, "engine", "engine.prot: unknown setting"),
    ({"engine": {"port": "eighty"}}, "engine.port", "engine.port: Input should be a valid integer"),
    ({"engine": {"port": 70000}}, "engine.port", "engine.port: Input should be less than or equal to 65535"),
    # and more of each kind
    ({"engine": {"port": 0}}, "engine.port", "engine.port: Input should be greater than or equal to 1"),
    ({"bench": {"repeats": 50}}, "bench.repeats", "bench.repeats: Input should be less than or equal to 20"),
    ({"tuning": {"cpu_governor": "turbo"}}, "tuning.cpu_governor", "tuning.cpu_governor: Input should be"),
    ({"tuning": {"sysctl": {"VM.Swappiness": 0}}}, "tuning.sysctl", "invalid name"),
    ({"bench": {"floors": [{"concurrency": 1, "input_tokens": 128}]}}, "bench.floors.0",
     "bench.floors.0.min_output_tps: Field required"),
    ({"apt": {"lock_wait_minutes": 10, "lock_wait": 5}}, "apt", "apt.lock_wait: unknown setting"),
    ({"enigne": {"port": 8000}}, "", "enigne: unknown setting"),
]


def write_layer(tmp_path: Path, layer: dict[str, Any]) -> Path:
    for name in ("base", "sandbox"):
        (tmp_path / f"{name}.yaml").write_text((PROFILES_DIR / f"{name}.yaml").read_text())
    path = tmp_path / "bad.yaml"
    path.write_text(f"{MODELINE}\n" + yaml.safe_dump({"extends": "sandbox", **layer}, sort_keys=False))
    return path


@pytest.mark.parametrize(("layer", "where", "loader_says"), BAD_LAYERS, ids=[said for _, _, said in BAD_LAYERS])
def test_schema_refuses_what_the_loader_refuses(tmp_path: Path, layer: dict[str, Any], where: str,
                                                loader_says: str) -> None:
    path = write_layer(tmp_path, layer)
    errors = list(VALIDATOR.iter_errors(yaml.safe_load(path.read_text())))
    assert {".".join(map(str, error.absolute_path)) for error in errors} == {where}, [e.message for e in errors]
    with pytest.raises(ProfileError, match="bad.yaml") as refused:
        load_profile("bad", profiles_dir=tmp_path)
    assert loader_says in str(refused.value)


def test_a_layer_sets_only_what_differs(tmp_path: Path) -> None:
    """A file gives part of a section (its parent gives the rest); the merged profile loads."""
    layer = {"engine": {"port": 8081, "auth": {"mode": "key"}}, "bench": {"repeats": 2}}
    path = write_layer(tmp_path, layer)
    assert list(VALIDATOR.iter_errors(yaml.safe_load(path.read_text()))) == []
    assert load_profile("bad", profiles_dir=tmp_path).engine.port == 8081


def test_the_schema_resolves_from_the_profile_folder() -> None:
    """What an editor does with the first line: the schema it names, relative to the file's own folder."""
    for path in PROFILE_FILES:
        named = path.read_text().splitlines()[0].split("$schema=", 1)[1]
        assert (path.parent / named).resolve() == SCHEMA_FILE.resolve()


def test_check_reads_the_schema_the_first_line_names(tmp_path: Path) -> None:
    """``python -m rigforge.profile.json_schema check``: the editor's check without an editor."""
    assert check_files(PROFILE_FILES) == []
    text = (PROFILES_DIR / "2x-pix.yaml").read_text()
    edited = tmp_path / "2x-pix.yaml"
    edited.write_text(text.replace("  count: 2\n", "  count: 2\n  cuont: 2\n").replace("topology: PIX", "topology: PCI")
                      .replace("  port: 8000", "  port: 70000"))
    assert check_files([edited]) == [f"{edited}: no schema {tmp_path / SCHEMA_FILE.name} (the first line names it "
                                      "from the file's folder)"]
    (tmp_path / SCHEMA_FILE.name).write_text(SCHEMA_FILE.read_text())
    assert check_files([edited]) == [
        f"{edited}: engine.port: 70000 is greater than the maximum of 65535",
        f"{edited}: gpus: Additional properties are not allowed ('cuont' was unexpected)",
        f"{edited}: gpus.topology: 'PCI' is not one of ['PIX', 'PXB', 'NODE', 'SYS', 'NV']",
    ]


# --- one description per setting: the comment in the profile file, in the schema and on the page -----------

def test_a_setting_means_what_its_comment_says() -> None:
    meaning = yaml_comments(PROFILES_DIR / "base.yaml")[("apt", "lock_wait_minutes")].meaning
    assert meaning.startswith("Minutes an apt operation waits")
    assert SCHEMA["properties"]["apt"]["properties"]["lock_wait_minutes"]["description"] == meaning
    assert meaning in SETTINGS_PAGE.read_text()


def test_a_comment_is_split_at_its_source() -> None:
    comment = yaml_comments(PROFILES_DIR / "base.yaml")[("modprobe", "p2p_registry_dwords")]
    assert comment.meaning == "What that override sets."
    assert comment.source.startswith("source: rig-facts §1.5")
    row = next(line for line in SETTINGS_PAGE.read_text().splitlines() if "`modprobe.p2p_registry_dwords`" in line)
    assert "What that override sets." in row and "rig-facts §1.5" in row


def test_the_page_says_how_it_is_made() -> None:
    assert SETTINGS_PAGE.read_text().splitlines()[2].startswith(f"Generated by `{REGENERATE}`")
