"""Helpers for testing the scripts in rigforge/remote/, which must run on a rig's python3 >= 3.9."""

from __future__ import annotations

import glob
import os
import subprocess

import pytest

OLDEST_SUPPORTED = "3.9"


def oldest_python() -> str:
    """Path of a working python3.9 (PATH or pyenv); skips the test when there is none."""
    candidates = [
        os.path.join(directory, f"python{OLDEST_SUPPORTED}")
        for directory in os.environ.get("PATH", "").split(os.pathsep)
    ]
    candidates += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{OLDEST_SUPPORTED}.*/bin/python3")))
    for candidate in candidates:
        # a pyenv shim exists on PATH even when it cannot run, so each one is tried
        if os.access(candidate, os.X_OK) and subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0:
            return candidate
    pytest.skip(f"no python{OLDEST_SUPPORTED} here to prove the script runs on the oldest rig python")
