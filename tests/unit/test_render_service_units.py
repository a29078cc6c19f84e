"""Golden files: the engine unit of every profile, exactly as the service role writes it.

A deliberate change to the unit template or a launch flag shows up here as a diff; regenerate with
``RIGFORGE_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_render_service_units.py`` and review it.
The tag of a built image hashes the images role's Dockerfile templates, so only its form is pinned here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from rigforge.profile.loader import load_profile
from rigforge.render import header_text
from roles.service import render_unit

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "service"
PROFILES = ["sandbox", "2x-pix", "4x-threadripper", "8x-turin"]
BUILT_TAG = re.compile(r"rigforge/([a-z0-9.-]+):[0-9a-f]{16}")


def normalized_unit(profile_name: str) -> str:
    unit = render_unit(load_profile(profile_name))
    return BUILT_TAG.sub(r"rigforge/\1:<content-hash>", unit)


@pytest.mark.parametrize("profile_name", PROFILES)
def test_unit_matches_its_golden_file(profile_name: str) -> None:
    golden = GOLDEN / f"{profile_name}.service"
    rendered = normalized_unit(profile_name)
    if os.environ.get("RIGFORGE_UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(rendered)
    assert rendered == golden.read_text(), f"{golden} differs: review, then regenerate (see module docstring)"


@pytest.mark.parametrize("profile_name", PROFILES)
def test_unit_basics(profile_name: str) -> None:
    profile = load_profile(profile_name)
    unit = render_unit(profile)
    assert unit.splitlines()[0] == f"# {header_text(profile)}"
    assert "EnvironmentFile=-/etc/rigforge/engine.env\n" in unit
    assert "Restart=on-failure\n" in unit
    assert "WantedBy=multi-user.target\n" in unit
    exec_start = unit.split("ExecStart=", 1)[1].split("\n")
    continued = [line for line in exec_start if line.endswith(" \\")]
    # one flag (with its value) per line: the first line is the program, every later one starts with a flag
    # or is the image / the engine's program
    assert len(continued) >= 7
    for line in continued[1:]:
        assert line.startswith("    ")


def test_container_units_depend_on_docker_and_clean_up_a_stale_container() -> None:
    unit = render_unit(load_profile("8x-turin"))
    assert "Requires=docker.service\n" in unit
    assert "ExecStartPre=-/usr/bin/docker rm -f rigforge-engine\n" in unit
    assert "ExecStop=/usr/bin/docker stop --time 60 rigforge-engine\n" in unit
    native = render_unit(load_profile("sandbox"))
    assert "docker" not in native
