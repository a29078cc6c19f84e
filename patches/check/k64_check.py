"""Compile check for the SM120 K=64 FlashInfer/CUTLASS patch: proof by compiling, no GPU needed.

Usage:
    python3 k64_check.py (--flashinfer DIR | --package flashinfer) [--nvcc PATH] [--expect compiles|fails]
                         [--patch NAME] [--figures] [--generate-kernels] [--jobs N]

Compiles k64_collective.cu (next to this file) for sm_120a against the CUTLASS headers shipped in the
FlashInfer package (``DIR/data/cutlass/include``): the MXFP8 x MXFP4 block-scaled grouped-GEMM kernel that
FlashInfer's SM120 MoE launcher builds, with a 128x128x64 CTA tile. With ``--expect compiles`` (the
default, used after the patch) a failed compile exits 1 with one line naming ``--patch``; with
``--expect fails`` (unpatched headers) a successful compile is the failure, and the first compiler error
is printed. ``--figures`` also compiles the K=128 tile and the NVFP4 K=64/K=128 tiles and prints each
kernel's pipeline stages and shared-storage bytes beside SM120's opt-in limit. ``--generate-kernels``
runs the package's own jit/gemm/cutlass/generate_kernels.py for SM120 and counts the K=64 instantiations.

Exit codes: 0 as expected, 1 not as expected, 2 bad input (no nvcc, no package, no headers).

Example:
    python3 k64_check.py --package flashinfer --patch flashinfer-0.6.6-sm120-k64.patch --generate-kernels
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "k64_collective.cu"
EXIT_OK, EXIT_UNEXPECTED, EXIT_BAD_INPUT = 0, 1, 2
NVCC_FLAGS = ("-std=c++17", "-arch=sm_120a", "--expt-relaxed-constexpr")
INSTANTIATION = re.compile(r"INSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM\((.*?)\);", re.DOTALL)


@dataclass(frozen=True)
class Variant:
    name: str
    tile_k: int
    defines: tuple[str, ...]


# The K=64 instantiation the patch exists for (FP8 activations, MXFP4 weights: 32 elements per scale factor).
K64 = Variant("MXFP8xMXFP4 128x128x64", 64, ("-DK64_MXFP8_MXFP4",))
FIGURES = (
    Variant("MXFP8xMXFP4 128x128x128", 128, ("-DK64_MXFP8_MXFP4",)),
    Variant("NVFP4xNVFP4 128x128x64", 64, ()),
    Variant("NVFP4xNVFP4 128x128x128", 128, ()),
)


@dataclass
class Compiled:
    variant: Variant
    ok: bool
    seconds: float
    output: str  # the binary's report line when ok, else the compiler's output

    @property
    def first_error(self) -> str:
        """The first ``error:`` line of the compiler output, without the long instantiation trail."""
        for line in self.output.splitlines():
            if " error" in line or line.startswith("error"):
                return line.strip()
        return self.output.strip().splitlines()[-1] if self.output.strip() else "no output"


def compile_variant(nvcc: str, include: Path, variant: Variant, workdir: Path) -> Compiled:
    """Verdict: compile the kernel to a cubin (nvcc's front end and device back end, no host compiler).

    When it compiles, a host-only build of the same types without the kernel runs to print the figures.
    """
    stem = workdir / re.sub(r"\W+", "_", variant.name)
    common = [nvcc, *NVCC_FLAGS, f"-DTILE_K={variant.tile_k}", *variant.defines, "-I", str(include), str(SOURCE)]
    started = time.monotonic()
    done = subprocess.run([*common, "-cubin", "-o", f"{stem}.cubin"], capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        return Compiled(variant, False, seconds, done.stdout + done.stderr)
    figures = subprocess.run([*common, "-DK64_FIGURES_ONLY", "-o", str(stem)], capture_output=True, text=True)
    if figures.returncode != 0:
        failed = Compiled(variant, False, 0, figures.stderr)
        return Compiled(variant, True, seconds, f"figures build failed: {failed.first_error}")
    report = subprocess.run([str(stem)], capture_output=True, text=True, check=True)
    return Compiled(variant, True, seconds, report.stdout.strip())


def count_k64_instantiations(package: Path, workdir: Path) -> tuple[int, int]:
    """Run the package's generate_kernels.py for SM120; return (all SM120 instantiations, K=64 ones).

    generate_kernels.py imports ``is_cuda_version_at_least`` from flashinfer.jit.cpp_ext, which pulls in
    torch; that helper is only called for SM100 kernels, so a stand-in that refuses to answer replaces it
    and the two real generator modules are loaded from the package's files.
    """
    root = package / "jit" / "gemm" / "cutlass"
    prefix = "k64_flashinfer"
    for name in (prefix, f"{prefix}.jit", f"{prefix}.jit.gemm", f"{prefix}.jit.gemm.cutlass"):
        module = types.ModuleType(name)
        module.__path__ = []  # a package, so the generator's relative imports resolve
        sys.modules[name] = module
    cpp_ext = types.ModuleType(f"{prefix}.jit.cpp_ext")

    def is_cuda_version_at_least(version: str) -> bool:
        raise AssertionError(f"generate_kernels asked for CUDA >= {version}: only SM100 kernels do that")

    cpp_ext.is_cuda_version_at_least = is_cuda_version_at_least  # type: ignore[attr-defined]
    sys.modules[cpp_ext.__name__] = cpp_ext
    generator = None
    for name in ("cutlass_library", "generate_kernels"):
        spec = importlib.util.spec_from_file_location(f"{prefix}.jit.gemm.cutlass.{name}", root / f"{name}.py")
        assert spec and spec.loader, f"cannot load {root / name}.py"
        generator = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = generator
        spec.loader.exec_module(generator)
    output = workdir / "generated"
    generator.generate_gemm_operations(str(output), "120")  # type: ignore[union-attr]
    total = k64 = 0
    for path in sorted(output.glob("*/120/*.cu")):
        for match in INSTANTIATION.finditer(path.read_text()):
            fields = [field.strip() for field in match.group(1).split(",")]
            total += 1
            k64 += fields[9] == "64"  # arch, act, weight, out, c, epilogue, fusion, then CTA M, N, K
    return total, k64


def find_package(name: str) -> Path:
    """The installed package's directory, found without importing it (importing FlashInfer needs a GPU stack)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"k64_check: bad input: package {name!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def find_nvcc(explicit: str | None) -> str:
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    candidates = [explicit] if explicit else [shutil.which("nvcc"), os.path.join(cuda_home, "bin", "nvcc")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit(f"k64_check: bad input: no nvcc at {explicit or 'PATH or $CUDA_HOME/bin'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--flashinfer", type=Path, help="FlashInfer package root (site-packages/flashinfer)")
    where.add_argument("--package", help="installed package name, e.g. flashinfer")
    parser.add_argument("--nvcc")
    parser.add_argument("--expect", choices=("compiles", "fails"), default="compiles")
    parser.add_argument("--patch", default="the K=64 patch", help="patch file named in the failure line")
    parser.add_argument("--figures", action="store_true", help="also compile K=128 and NVFP4 tiles for figures")
    parser.add_argument("--generate-kernels", action="store_true")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    try:
        package = args.flashinfer.resolve() if args.flashinfer else find_package(args.package)
        nvcc = find_nvcc(args.nvcc)
    except SystemExit as error:
        print(error, file=sys.stderr)
        return EXIT_BAD_INPUT
    include = package / "data" / "cutlass" / "include"
    if not (include / "cutlass" / "version.h").is_file():
        print(f"k64_check: bad input: no CUTLASS headers under {include}", file=sys.stderr)
        return EXIT_BAD_INPUT
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    print(f"k64_check: nvcc {version[-1] if version else '?'}; CUTLASS headers {include}")

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="k64-check-") as scratch:
        workdir = Path(scratch)
        if args.generate_kernels:
            total, k64 = count_k64_instantiations(package, workdir)
            print(f"generate_kernels.py (SM120): {total} grouped-GEMM instantiations, {k64} with CTA K=64")
        variants = (K64, *FIGURES) if args.figures else (K64,)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(args.jobs, len(variants)))) as pool:
            results = list(pool.map(lambda v: compile_variant(nvcc, include, v, workdir), variants))
    for result in results:
        state = "compiles" if result.ok else "does not compile"
        detail = result.output if result.ok else f"first error: {result.first_error}"
        print(f"{result.variant.name}: {state} ({result.seconds:.0f} s); {detail}")
    k64 = results[0]
    summary = f"k64_check: {len(results)} compile(s) in {time.monotonic() - started:.0f} s"
    if args.expect == "compiles" and not k64.ok:
        print(f"{summary}; K=64 SM120 block-scaled grouped GEMM does not compile with {args.patch} applied: "
              f"{k64.first_error}", file=sys.stderr)
        return EXIT_UNEXPECTED
    if args.expect == "fails" and k64.ok:
        print(f"{summary}; K=64 compiled without {args.patch}: these headers need no patch", file=sys.stderr)
        return EXIT_UNEXPECTED
    print(f"{summary}; K=64 {'compiles' if k64.ok else 'fails'} as expected")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
