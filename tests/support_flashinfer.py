"""Real FlashInfer sources for tests: files from the flashinfer-python 0.6.6 and 0.7.2.post1 wheels from PyPI.

The wheel (62 MB) is downloaded once with ``pip download`` into .cache/wheels/ (git-ignored) and
checked against a pinned sha256. Without network access to the package index the calling test is
skipped with the reason, except under CI=true, where a missing wheel is a failure.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

REQUIREMENT = "flashinfer-python==0.7.2.post1"
WHEEL_NAME = "flashinfer_python-0.7.2.post1-py3-none-any.whl"
WHEEL_SHA256 = "bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49"
CACHE_DIR = Path(__file__).resolve().parents[1] / ".cache" / "wheels"

# Paths relative to the package root (site-packages/flashinfer), as in the test patch.
GENERATE_KERNELS = "jit/gemm/cutlass/generate_kernels.py"
SM120_BUILDER = "data/cutlass/include/cutlass/gemm/collective/builders/sm120_blockscaled_mma_builder.inl"
MOE_DISPATCH = "data/csrc/nv_internal/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/moe_gemm_template_dispatch_tma_ws.h"
PATCHED_FILES = (GENERATE_KERNELS, SM120_BUILDER, MOE_DISPATCH)

# pip's own words when it cannot reach the index; anything else is a real failure
UNREACHABLE_MARKERS = (
    "NewConnectionError",
    "ConnectTimeout",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "ProxyError",
    "Connection refused",
)


# The release the real K=64 patch (patches/flashinfer-0.6.6-sm120-k64.patch) is written for: what vLLM
# v0.19.1 installs. Its wheel (7.8 MB) bundles CUTLASS 4.2.1 under flashinfer/data/cutlass/include.
K64_REQUIREMENT = "flashinfer-python==0.6.6"
K64_WHEEL_NAME = "flashinfer_python-0.6.6-py3-none-any.whl"
K64_WHEEL_SHA256 = "078f158636969eec1a0d3dea19c3ca90b426b66df89bbf7b7b8276ce2ec08148"


def flashinfer_wheel() -> Path:
    """Path of the cached, sha256-checked 0.7.2.post1 wheel; downloads it first when missing."""
    return cached_wheel(REQUIREMENT, WHEEL_NAME, WHEEL_SHA256)


def cached_wheel(requirement: str, wheel_name: str, sha256: str) -> Path:
    """Path of a cached, sha256-checked wheel from PyPI; downloads it first when missing."""
    wheel = CACHE_DIR / wheel_name
    if not wheel.exists():
        _download(wheel, requirement)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert digest == sha256, f"{wheel} has sha256 {digest}, expected {sha256}; delete it"
    return wheel


def _download(wheel: Path, requirement: str) -> None:
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    print(f"downloading {requirement} into {CACHE_DIR}", file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as scratch:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--retries", "1"]
        done = subprocess.run([*command, "--timeout", "30", "-d", scratch, requirement], capture_output=True, text=True)
        if done.returncode != 0:
            output = (done.stdout + done.stderr).strip()
            reason = f"cannot download {requirement}: {output.splitlines()[-1] if output else 'pip failed'}"
            unreachable = any(marker in output for marker in UNREACHABLE_MARKERS)
            if unreachable and os.environ.get("CI") != "true":
                pytest.skip(f"package index unreachable, real FlashInfer sources unavailable ({reason})")
            pytest.fail(f"{reason}\n{output}")
        # the rename makes a half-downloaded wheel impossible to mistake for a cached one
        os.replace(Path(scratch) / wheel.name, wheel)


# The four files the real K=64 patch changes, in the order of its sections.
TMA_TRAITS = "data/cutlass/include/cute/atom/copy_traits_sm90_tma.hpp"
K64_PATCHED_FILES = (TMA_TRAITS, SM120_BUILDER, GENERATE_KERNELS, MOE_DISPATCH)


def k64_wheel() -> Path:
    """Path of the cached, sha256-checked 0.6.6 wheel (the real K=64 patch's release)."""
    return cached_wheel(K64_REQUIREMENT, K64_WHEEL_NAME, K64_WHEEL_SHA256)


def extract_package(
    site_packages: Path, members: tuple[str, ...] = PATCHED_FILES, wheel_path: Path | None = None
) -> Path:
    """Unpack ``members`` (plus __init__.py) of a wheel (default 0.7.2.post1) to ``site_packages/flashinfer``."""
    package = site_packages / "flashinfer"
    with zipfile.ZipFile(wheel_path or flashinfer_wheel()) as wheel:
        for member in ("__init__.py", *members):
            target = package / member
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(wheel.read(f"flashinfer/{member}"))
    return package
