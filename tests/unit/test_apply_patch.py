"""rigforge/remote/apply_patch.py against the real FlashInfer 0.6.6 sources and the real K=64 patch.

The patch is patches/flashinfer-0.6.6-sm120-k64.patch (what the 4x profile applies); the tree it applies
to is unpacked from the flashinfer-python 0.6.6 wheel from PyPI.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rigforge.remote.apply_patch import EXIT_BAD_INPUT, EXIT_CONFLICT, EXIT_NOT_APPLIED, main
from tests.support_flashinfer import (
    GENERATE_KERNELS,
    K64_PATCHED_FILES,
    MOE_DISPATCH,
    SM120_BUILDER,
    TMA_TRAITS,
    extract_package,
    k64_wheel,
)
from tests.support_remote import oldest_python

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "rigforge" / "remote" / "apply_patch.py"
PATCH = REPO / "patches" / "flashinfer-0.6.6-sm120-k64.patch"
PATCH_SHA256 = hashlib.sha256(PATCH.read_bytes()).hexdigest()


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A pristine site-packages/flashinfer holding the four files the patch changes."""
    return extract_package(tmp_path / "site-packages", K64_PATCHED_FILES, k64_wheel())


def snapshot(root: Path) -> dict[str, tuple[str, int, int]]:
    """sha256, mtime and mode of every file under ``root`` (temp files would show up here too)."""
    return {
        str(path.relative_to(root)): (
            hashlib.sha256(path.read_bytes()).hexdigest(),
            path.stat().st_mtime_ns,
            path.stat().st_mode,
        )
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def run(package: Path, *extra: str) -> int:
    return main([str(PATCH), "--root", str(package), *extra])


def test_applies_to_real_sources(package: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(package, "--check") == EXIT_NOT_APPLIED
    assert "not-applied" in capsys.readouterr().out
    assert run(package, "--sha256", PATCH_SHA256) == 0
    assert capsys.readouterr().out.startswith("applied-now flashinfer-0.6.6-sm120-k64.patch: 4 files")

    kernels = (package / GENERATE_KERNELS).read_text()
    for shape in ("[128, 128, 64]", "[128, 256, 64]", "[256, 128, 64]"):
        assert kernels.count(shape) == 2  # the cta list and the K=64 list the dtype filter uses
    compile(kernels, GENERATE_KERNELS, "exec")  # the patched generator is still valid Python
    assert "using EffBlk_SF" in (package / SM120_BUILDER).read_text()
    assert "(TileM == 256 && TileN == 128 && TileK == 64);" in (package / MOE_DISPATCH).read_text()
    assert "is_constant<0, decltype(ej)>::value" in (package / TMA_TRAITS).read_text()


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch not installed for the cross-check")
def test_result_is_byte_identical_to_gnu_patch(package: Path, tmp_path: Path) -> None:
    reference = shutil.copytree(package, tmp_path / "gnu")
    subprocess.run(["patch", "-p1", "-s", "-i", str(PATCH)], cwd=reference, check=True)
    assert run(package) == 0
    for name in K64_PATCHED_FILES:
        assert (package / name).read_bytes() == (reference / name).read_bytes(), name


def test_reapply_is_a_no_op(package: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(package) == 0
    before = snapshot(package)
    capsys.readouterr()
    assert run(package) == 0
    assert capsys.readouterr().out.startswith("already-applied ")
    assert run(package, "--check") == 0
    assert "already-applied" in capsys.readouterr().out
    assert snapshot(package) == before


def test_conflict_in_last_file_writes_nothing(package: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dispatch = package / MOE_DISPATCH
    changed = "(TileM == 128 && TileN == 256 && TileK == 128) ||"
    dispatch.write_text(dispatch.read_text().replace(changed, changed.replace("256", "512"), 1))
    before = snapshot(package)

    assert run(package, "--check") == EXIT_CONFLICT
    assert run(package) == EXIT_CONFLICT
    message = capsys.readouterr().err
    assert f"{MOE_DISPATCH}: hunk 1 @@ -309,7 +309,12 @@ does not match" in message
    assert "expected '         (TileM == 128 && TileN == 256 && TileK == 128) ||'" in message
    assert "found '         (TileM == 128 && TileN == 512 && TileK == 128) ||'" in message
    assert snapshot(package) == before  # files 1 to 3 untouched, no temp files left behind


def test_partially_patched_tree_is_named(package: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pristine = (package / SM120_BUILDER).read_bytes(), (package / MOE_DISPATCH).read_bytes()
    assert run(package) == 0
    (package / SM120_BUILDER).write_bytes(pristine[0])
    (package / MOE_DISPATCH).write_bytes(pristine[1])
    capsys.readouterr()
    assert run(package) == EXIT_CONFLICT
    err = capsys.readouterr().err
    assert f"(already patched: {TMA_TRAITS}, {GENERATE_KERNELS}; the tree is partially patched)" in err


def test_wrong_sha256_refused_before_anything(package: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(package)
    assert run(package, "--sha256", "0" * 64) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"refusing {PATCH.name}: sha256 is {PATCH_SHA256}, expected {'0' * 64}" in err
    assert snapshot(package) == before
    assert run(package, "--sha256", "not-hex") == EXIT_BAD_INPUT


def test_hash_is_checked_before_the_patch_is_parsed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    garbage = tmp_path / "garbage.patch"
    garbage.write_bytes(b"this is not a diff\n")
    assert main([str(garbage), "--root", str(tmp_path), "--sha256", "1" * 64]) == EXIT_BAD_INPUT
    assert "refusing garbage.patch: sha256 is" in capsys.readouterr().err


def test_offset_and_mode_are_handled(package: Path) -> None:
    kernels = package / GENERATE_KERNELS
    kernels.write_text("# five lines added upstream\n" * 5 + kernels.read_text())
    kernels.chmod(0o755)
    assert run(package) == 0
    assert "[256, 128, 64]," in kernels.read_text()
    assert kernels.stat().st_mode & 0o777 == 0o755


def test_script_finds_installed_package(package: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(package.parent)}
    command = [sys.executable, str(SCRIPT), str(PATCH), "--package", "flashinfer", "--sha256", PATCH_SHA256]
    first = subprocess.run(command, capture_output=True, text=True, env=env)
    second = subprocess.run(command, capture_output=True, text=True, env=env)
    assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
    assert first.stdout.startswith("applied-now") and second.stdout.startswith("already-applied")
    assert str(package) in first.stdout
    missing = subprocess.run([*command[:4], "no_such_package_here"], capture_output=True, text=True)
    assert missing.returncode == EXIT_BAD_INPUT and "not installed" in missing.stderr


def real_diff(tmp_path: Path, old: bytes | None, new: bytes | None, name: str = "f.txt") -> Path:
    """A patch made by GNU diff -u (None: the file is absent on that side)."""
    sides = []
    for label, content in (("old", old), ("new", new)):
        path = tmp_path / f"{label}-{name}"
        if content is not None:
            path.write_bytes(content)
        sides.append(str(path) if content is not None else "/dev/null")
    labels = ["/dev/null" if old is None else f"a/{name}", "/dev/null" if new is None else f"b/{name}"]
    made = subprocess.run(["diff", "-u", "--label", labels[0], "--label", labels[1], *sides], capture_output=True)
    assert made.returncode == 1, made.stderr
    patch = tmp_path / f"{name}.patch"
    patch.write_bytes(made.stdout)
    return patch


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b"one\ntwo\nthree\n", b"one\nTWO\nthree"),  # new side ends without a newline
        (b"one\ntwo", b"one\ntwo\nthree\n"),  # old side ends without a newline
        (b"keep\r\nold\r\n", b"keep\r\nnew\r\n"),  # CRLF survives byte for byte
        (None, b"created\n"),
        (b"deleted\n", None),
    ],
    ids=["no-eol-new", "no-eol-old", "crlf", "create", "delete"],
)
def test_edge_cases_from_real_diff(tmp_path: Path, old: bytes | None, new: bytes | None) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    if old is not None:
        (tree / "f.txt").write_bytes(old)
    patch = real_diff(tmp_path, old, new)
    for _ in range(2):  # second run: already applied
        assert main([str(patch), "--root", str(tree)]) == 0
        if new is None:
            assert not (tree / "f.txt").exists()
        else:
            assert (tree / "f.txt").read_bytes() == new


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (b"--- a/../escape\n+++ b/../escape\n@@ -1 +1 @@\n-a\n+b\n", "unsafe or empty path"),
        (b"--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,3 @@\n-a\n+b\n", "patch ends inside hunk"),
        (b"--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-a\n?b\n", "shorter than its header says"),
        (b"just prose, no diff\n", "no file sections found"),
        (b"diff --git a/x b/x\nGIT binary patch\nliteral 1\n", "unsupported patch content"),
    ],
    ids=["dotdot", "truncated", "bad-line", "not-a-diff", "binary"],
)
def test_bad_patches_are_bad_input(tmp_path: Path, text: bytes, error: str, capsys: pytest.CaptureFixture[str]) -> None:
    patch = tmp_path / "bad.patch"
    patch.write_bytes(text)
    assert main([str(patch), "--root", str(tmp_path)]) == EXIT_BAD_INPUT
    assert error in capsys.readouterr().err


def test_script_runs_on_oldest_rig_python(package: Path) -> None:
    python = oldest_python()
    command = [python, str(SCRIPT), str(PATCH), "--root", str(package), "--sha256", PATCH_SHA256]
    results = [subprocess.run([*command, *extra], capture_output=True, text=True) for extra in (["--check"], [], [])]
    assert [r.returncode for r in results] == [EXIT_NOT_APPLIED, 0, 0], results[-1].stderr
    assert results[2].stdout.startswith("already-applied")
