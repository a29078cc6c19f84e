"""The image's contents file (rigforge/remote/image_contents.py), made here from this machine's real Python
environment and a real git checkout, as the last step of an image build makes it in the image."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rigforge.images.plans import IMAGE_CONTENTS_SOURCE


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(IMAGE_CONTENTS_SOURCE), *args], capture_output=True, text=True,
                          check=False)


def test_the_file_names_the_checkouts_commits_freezes_and_versions(tmp_path: Path) -> None:
    checkout = tmp_path / "cutlass"
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    header = checkout / "include" / "cutlass" / "version.h"
    header.parent.mkdir(parents=True)
    header.write_text("#define CUTLASS_MAJOR 4\n#define CUTLASS_MINOR 4\n#define CUTLASS_PATCH 1\n")
    subprocess.run(["git", "-C", str(checkout), "-c", "user.email=t@example.org", "-c", "user.name=t", "commit",
                    "-q", "--allow-empty", "-m", "one"], check=True)
    commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    subprocess.run(["git", "-C", str(checkout), "checkout", "-q", commit], check=True)  # detached, as a build does
    out = tmp_path / "etc" / "image.json"

    proc = run("--engine", "vllm", "--checkout", f"CUTLASS_REF={checkout}", "--out", str(out))

    assert proc.returncode == 0, proc.stderr
    document = json.loads(out.read_text())
    assert document["checkouts"] == {"CUTLASS_REF": {"path": str(checkout), "commit": commit}}
    versions = document["versions"]
    assert versions["python"] == ".".join(map(str, sys.version_info[:3]))
    assert versions["cutlass"][f"checkout CUTLASS_REF ({checkout})"] == "4.4.1"
    assert versions["engine"] == {"kind": "vllm", "version": None}  # no vLLM in this environment
    freeze = document["pip_freeze"]
    assert any(line.startswith("pytest==") for line in freeze) and any(line.startswith("pyinfra==") for line in freeze)
    assert freeze == sorted(freeze, key=str.lower)
    assert proc.stdout.startswith(f"image_contents: {len(freeze)} distributions;") and commit in proc.stdout


def test_a_checkout_that_is_not_there_fails_the_build_step(tmp_path: Path) -> None:
    proc = run("--engine", "sglang", "--checkout", f"SGLANG_REF={tmp_path / 'missing'}", "--out",
               str(tmp_path / "image.json"))
    assert proc.returncode == 1 and not (tmp_path / "image.json").exists()
    assert proc.stderr.strip() == f"image_contents: no git checkout at {tmp_path / 'missing'}"
