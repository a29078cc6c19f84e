"""The weights fact's parser, on real output captured on a sandbox host (tests/fixtures/serving)."""

from __future__ import annotations

from pathlib import Path

from rigforge.facts.weights import (
    DiskFile,
    WeightsOnDisk,
    find_time_to_ns,
    parse_df,
    parse_manifest,
    parse_weights_state,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "serving"
GGUF = "gemma-3-270m-q4_k_m.gguf"
GGUF_SHA = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def capture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_complete_model_is_verified_from_the_manifest_and_stat_alone() -> None:
    state = parse_weights_state(capture("weights-complete.txt"))
    assert state.manifest is not None
    assert state.manifest.source == "local"
    assert state.files == {GGUF: DiskFile(253113024, 1795317273668986709)}
    assert state.verified(GGUF, GGUF_SHA)
    assert state.all_recorded_verified()
    assert state.free_bytes == 80224063488
    assert state.free_path == "/"


def test_a_changed_mtime_or_another_sha256_is_not_verified() -> None:
    state = parse_weights_state(capture("weights-complete.txt"))
    touched = capture("weights-complete.txt").replace("1795317273.6689867090", "1795317999.0000000000")
    assert not parse_weights_state(touched).verified(GGUF, GGUF_SHA)
    assert not state.verified(GGUF, "0" * 64)
    assert not state.verified("other.gguf")


def test_partial_transfer_shows_its_part_size_and_nothing_verified() -> None:
    state = parse_weights_state(capture("weights-partial.txt"))
    assert state.manifest is None
    assert state.part_size(GGUF) == 1048576
    assert not state.verified(GGUF, GGUF_SHA)
    assert not state.all_recorded_verified()


def test_folder_not_created_yet_still_reports_free_space_of_its_parent() -> None:
    state = parse_weights_state(capture("weights-missing-dir.txt"))
    assert state.manifest is None and state.files == {}
    assert state.free_bytes == 80222904320


def test_find_times_convert_to_exact_nanoseconds() -> None:
    assert find_time_to_ns("1795317273.6689867090") == 1795317273668986709
    assert find_time_to_ns("1700000000") == 1700000000_000000000
    assert find_time_to_ns("1700000000.5") == 1700000000_500000000


def test_unreadable_manifests_are_ignored_not_trusted() -> None:
    assert parse_manifest("") is None
    assert parse_manifest('{"files": [{"name": "x"}]}') is None
    assert parse_manifest('{"source": "local", "files": [{"name": "x", "size": 1') is None


def test_df_line_with_spaces_in_the_mount_point() -> None:
    assert parse_df("Filesystem 1-blocks Used Available Capacity Mounted on\n"
                    "/dev/sdb1 1000 400 600 40% /mnt/big disk") == (600, "/mnt/big disk")
    assert parse_df("") == (0, "")


def test_command_quotes_the_path_and_never_reads_file_contents() -> None:
    command = WeightsOnDisk().command("/srv/models/a b")
    assert "d='/srv/models/a b'" in command
    assert "sha256sum" not in command and "md5sum" not in command
