"""Golden files: every file the host roles write, for each of the three real rig profiles.

The files are rendered for an Ubuntu 24.04 x86_64 rig (what the documented rigs run) and compared with
tests/golden/host/<profile>/<path on the rig>. After an intended change, regenerate and review the diff:

    RIGFORGE_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_render_host_golden.py
"""

from __future__ import annotations

import difflib
import os
import shutil
from pathlib import Path

import pytest

from rigforge.operations.nvidia_apt import RepoPlatform
from rigforge.profile.loader import load_profile
from roles.host import render_host_files

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "host"
PROFILES = ("2x-pix", "4x-threadripper", "8x-turin")
PLATFORM = RepoPlatform("ubuntu2404", "x86_64")


def _golden(profile: str) -> dict[str, str]:
    root = GOLDEN / profile
    return {"/" + str(path.relative_to(root)): path.read_text() for path in sorted(root.rglob("*")) if path.is_file()}


def _write_golden(profile: str, files: dict[str, str]) -> None:
    root = GOLDEN / profile
    shutil.rmtree(root, ignore_errors=True)
    for path, content in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)


@pytest.mark.parametrize("profile", PROFILES)
def test_host_files_match_golden(profile: str) -> None:
    rendered = render_host_files(load_profile(profile), PLATFORM)
    if os.environ.get("RIGFORGE_UPDATE_GOLDEN"):
        _write_golden(profile, rendered)
    golden = _golden(profile)
    assert sorted(rendered) == sorted(golden), "a host role writes other files than the golden set"
    for path, content in rendered.items():
        diff = "".join(difflib.unified_diff(golden[path].splitlines(True), content.splitlines(True),
                                            f"golden{path}", f"rendered{path}"))
        assert not diff, f"{path} differs from its golden file:\n{diff}"
