"""weights_tool.py, the rig-side half of the weights role: verify, rename, record, re-hash, disk space.

Runs the real script as the rig does (``python3 weights_tool.py ...``) on files in a temporary folder;
the mirror source downloads from a real HTTP server on 127.0.0.1 that drops the connection midway.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rigforge.facts.weights import parse_manifest
from tests.support_range_server import RangeServer
from tests.support_remote import oldest_python

TOOL = Path(__file__).resolve().parents[2] / "rigforge" / "remote" / "weights_tool.py"
PAYLOAD = os.urandom(3 * 1024 * 1024 + 123)
SHA = hashlib.sha256(PAYLOAD).hexdigest()


def tool(*args: object, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, str(TOOL), *map(str, args)], capture_output=True, text=True, timeout=60)


def manifest(folder: Path) -> dict:
    return json.loads((folder / ".rigforge-manifest.json").read_text())


def file_args(folder: Path, sha: str = SHA, size: int = len(PAYLOAD)) -> list[object]:
    return ["--dir", folder, "--name", "model.bin", "--sha256", sha, "--size", size]


def test_finish_renames_a_verified_part_and_records_size_mtime_sha(tmp_path: Path) -> None:
    (tmp_path / "model.bin.part").write_bytes(PAYLOAD)
    done = tool("finish", *file_args(tmp_path), "--source", "local", "--origin", "model.bin")
    assert done.returncode == 0, done.stderr
    assert "verified" in done.stdout
    assert not (tmp_path / "model.bin.part").exists()
    stat = (tmp_path / "model.bin").stat()
    entry = manifest(tmp_path)["files"][0]
    assert entry == {"name": "model.bin", "size": len(PAYLOAD), "sha256": SHA, "mtime_ns": stat.st_mtime_ns}
    parsed = parse_manifest((tmp_path / ".rigforge-manifest.json").read_text())
    assert parsed is not None and parsed.source == "local"


def test_finish_deletes_a_part_with_the_wrong_content(tmp_path: Path) -> None:
    (tmp_path / "model.bin.part").write_bytes(PAYLOAD[:-1] + b"\0")
    failed = tool("finish", *file_args(tmp_path), "--source", "local", "--origin", "x")
    assert failed.returncode == 1
    assert "sha256 is" in failed.stderr and "expected" in failed.stderr
    assert not (tmp_path / "model.bin.part").exists() and not (tmp_path / "model.bin").exists()


def test_adopt_records_a_right_file_and_deletes_a_wrong_one(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(PAYLOAD)
    assert tool("adopt", *file_args(tmp_path), "--source", "local", "--origin", "x").returncode == 0
    assert manifest(tmp_path)["files"][0]["sha256"] == SHA
    (tmp_path / "model.bin").write_bytes(b"not the model")
    kept = tool("adopt", *file_args(tmp_path), "--source", "local", "--origin", "x")
    assert kept.returncode == 0 and "does not match" in kept.stdout
    assert not (tmp_path / "model.bin").exists() and manifest(tmp_path)["files"] == []


def test_verify_finds_a_flipped_byte_that_size_and_mtime_cannot_see(tmp_path: Path) -> None:
    (tmp_path / "model.bin.part").write_bytes(PAYLOAD)
    tool("finish", *file_args(tmp_path), "--source", "local", "--origin", "x")
    model = tmp_path / "model.bin"
    before = model.stat()
    with model.open("r+b") as handle:
        handle.seek(len(PAYLOAD) // 2)
        byte = handle.read(1)
        handle.seek(len(PAYLOAD) // 2)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(model, ns=(before.st_atime_ns, before.st_mtime_ns))  # silent corruption: stat unchanged
    checked = tool("verify", "--dir", tmp_path)
    assert checked.returncode == 0
    assert "1 corrupt (model.bin)" in checked.stdout
    assert not model.exists() and manifest(tmp_path)["files"] == []


def test_verify_of_intact_files_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "model.bin.part").write_bytes(PAYLOAD)
    tool("finish", *file_args(tmp_path), "--source", "local", "--origin", "x")
    recorded = manifest(tmp_path)["files"]
    checked = tool("verify", "--dir", tmp_path)
    assert "0 corrupt" in checked.stdout and manifest(tmp_path)["files"] == recorded


def test_check_space_fails_with_the_numbers(tmp_path: Path) -> None:
    need = 10**18
    failed = tool("check-space", "--path", tmp_path / "not" / "yet", "--need", need,
                  "--expected", need, "--present", 0)
    assert failed.returncode == 1
    assert "need 1000000000.0 GB more (1000000000.0 GB expected, 0.0 GB already there)" in failed.stderr
    assert f"GB free on the filesystem of {tmp_path}" in failed.stderr
    assert tool("check-space", "--path", tmp_path, "--need", 1).returncode == 0


def test_mirror_download_resumes_after_a_dropped_connection(tmp_path: Path) -> None:
    with RangeServer(PAYLOAD) as server:
        server.cuts = [len(PAYLOAD) // 3]  # the first response stops a third of the way
        done = tool("mirror", *file_args(tmp_path), "--url", server.url())
        assert done.returncode == 0, done.stderr
        ranges = [request["range"] for request in server.requests]
    assert ranges[0] is None and ranges[1] == f"bytes={len(PAYLOAD) // 3}-"
    assert (tmp_path / "model.bin").read_bytes() == PAYLOAD
    entry = manifest(tmp_path)["files"][0]
    assert (entry["sha256"], manifest(tmp_path)["source"]) == (SHA, "mirror")


def test_mirror_refuses_wrong_bytes(tmp_path: Path) -> None:
    with RangeServer(PAYLOAD) as server:
        failed = tool("mirror", *file_args(tmp_path, sha="0" * 64), "--url", server.url())
    assert failed.returncode == 1 and "sha256" in failed.stderr
    assert not (tmp_path / "model.bin").exists()


def test_runs_on_the_oldest_rig_python(tmp_path: Path) -> None:
    python = oldest_python()
    (tmp_path / "model.bin.part").write_bytes(PAYLOAD)
    done = tool("finish", *file_args(tmp_path), "--source", "local", "--origin", "x", python=python)
    assert done.returncode == 0, done.stderr
    assert "0 corrupt" in tool("verify", "--dir", tmp_path, python=python).stdout


@pytest.mark.parametrize("args", [["finish", "--dir", "/tmp"], ["no-such-command"]])
def test_bad_input_exits_2(args: list[str]) -> None:
    assert tool(*args).returncode == 2
