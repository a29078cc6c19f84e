"""What the bench role promises: the client installed as this checkout renders it, and a passing latest run.

The client check finds drift (an edited or stale copy on the rig); the result check reads the rig's own
``/var/lib/rigforge/bench/latest.json``, so a rig whose last smoke benchmark failed does not verify.
"""

from __future__ import annotations

import json

import pytest

from rigforge.bench_runs.plan import HOST_LATEST_NAME, HOST_RESULTS_DIR, REMOTE_LIB_DIR, library_files
from rigforge.bench_runs.report import judge
from rigforge.profile import Profile
from roles.bench import render_library_file


def test_client_installed_as_rendered(host, profile: Profile) -> None:
    drifted = [
        path for path, source in library_files().items()
        if host.file(path).content_string != render_library_file(profile, path, source)
    ]  # fmt: skip
    assert not drifted, f"bench client differs from this checkout (run deploys/bench.py): {drifted}"


def test_client_imports_with_the_rigs_python(host) -> None:
    run = host.run(f"cd / && PYTHONPATH={REMOTE_LIB_DIR} python3 -c 'import rigforge.bench.runner'")
    assert run.rc == 0, run.stderr


def test_latest_run_passed_its_checks_and_floors(host, profile: Profile) -> None:
    latest = host.file(f"{HOST_RESULTS_DIR}/{HOST_LATEST_NAME}")
    if not latest.exists:
        pytest.skip("no smoke benchmark has run on this rig yet (deploys/bench.py)")
    result = json.loads(latest.content_string)
    verdict = judge(result, profile.bench.floors)
    assert result["status"] == "ok" and verdict.passed, verdict.render()
