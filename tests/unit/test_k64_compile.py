"""Compile proof for the K=64 SM120 patch (slow: ~10 min on 2 cores; run with ``pytest -m slow -k k64 -s``).

Real parts: the flashinfer-python 0.6.6 wheel from PyPI (the release vLLM v0.19.1 installs, with its own
CUTLASS 4.2.1 headers), the real patch patches/flashinfer-0.6.6-sm120-k64.patch applied by
rigforge/remote/apply_patch.py, and nvcc 13.x from PyPI (nvidia-cuda-nvcc, -runtime, -cccl), installed by
this test into .cache/nvcc/ when missing. No GPU: nvcc compiles for sm_120a and the figures come from a host
build. Nothing is a stand-in except the one generate_kernels.py import that k64_check.py documents.

What it proves: unpatched, the MXFP8 x MXFP4 128x128x64 grouped-GEMM kernel does not compile (first error
recorded); patched, it compiles, and generate_kernels.py emits K=64 SM120 instantiations only with the
patch. The full output goes to results/k64-compile-proof.txt; the committed copy is in tests/fixtures/k64/.
"""

from __future__ import annotations

import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from rigforge.remote.apply_patch import main as apply_patch
from tests.support_flashinfer import K64_REQUIREMENT, K64_WHEEL_NAME, K64_WHEEL_SHA256, cached_wheel

REPO = Path(__file__).resolve().parents[2]
PATCH = REPO / "patches" / "flashinfer-0.6.6-sm120-k64.patch"
CHECK = REPO / "patches" / "check" / "k64_check.py"
NVCC_HOME = REPO / ".cache" / "nvcc" / "site"
NVCC = NVCC_HOME / "nvidia" / "cu13" / "bin" / "nvcc"
# nvcc 13.5 and what it needs to compile CUTLASS host+device code (cuda_runtime.h, libcu++/CUB headers)
NVCC_REQUIREMENTS = ("nvidia-cuda-nvcc==13.5.37", "nvidia-cuda-runtime==13.5.37", "nvidia-cuda-cccl==13.3.5.0.6")
RECORD = REPO / "results" / "k64-compile-proof.txt"


def _nvcc() -> Path:
    if not NVCC.exists():
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(NVCC_HOME), *NVCC_REQUIREMENTS]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot install nvcc from PyPI: {(done.stdout + done.stderr).strip().splitlines()[-1:]}")
    return NVCC


def _package(root: Path) -> Path:
    with zipfile.ZipFile(cached_wheel(K64_REQUIREMENT, K64_WHEEL_NAME, K64_WHEEL_SHA256)) as wheel:
        wheel.extractall(root, [name for name in wheel.namelist() if name.startswith("flashinfer/")])
    return root / "flashinfer"


def _check(package: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(CHECK), "--flashinfer", str(package), "--nvcc", str(_nvcc()),
               "--patch", PATCH.name, "--generate-kernels", "--jobs", "2", *extra]
    return subprocess.run(command, capture_output=True, text=True)


@pytest.mark.slow
def test_k64_kernel_compiles_only_with_the_patch(tmp_path: Path) -> None:
    unpatched = _package(tmp_path / "unpatched")
    patched = _package(tmp_path / "patched")
    assert apply_patch([str(PATCH), "--root", str(patched)]) == 0

    started = time.monotonic()
    before = _check(unpatched, "--expect", "fails")
    after = _check(patched, "--figures")
    minutes = (time.monotonic() - started) / 60
    record = (f"# pytest -m slow -k k64: {minutes:.1f} min on this machine\n# unpatched flashinfer-python 0.6.6:\n"
              f"{before.stdout}{before.stderr}# patched with {PATCH.name}:\n{after.stdout}{after.stderr}")
    RECORD.parent.mkdir(exist_ok=True)
    RECORD.write_text(record)
    print(record)

    assert before.returncode == 0, record
    assert ("MXFP8xMXFP4 128x128x64: does not compile" in before.stdout
            and "TMA requires CTA_Tile and SLayout top-level size equivalence" in before.stdout), record
    assert "generate_kernels.py (SM120): 40 grouped-GEMM instantiations, 0 with CTA K=64" in before.stdout
    assert after.returncode == 0, record
    assert "generate_kernels.py (SM120): 64 grouped-GEMM instantiations, 24 with CTA K=64" in after.stdout
    for tile in ("MXFP8xMXFP4 128x128x64", "MXFP8xMXFP4 128x128x128", "NVFP4xNVFP4 128x128x64",
                 "NVFP4xNVFP4 128x128x128"):
        line = next(line for line in after.stdout.splitlines() if line.startswith(f"{tile}: "))
        assert f"{tile}: compiles" in line and "mainloop stages" in line and "SM120 opt-in limit 101376" in line
