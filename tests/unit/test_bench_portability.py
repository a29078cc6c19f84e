"""rigforge/bench runs on a rig's own python3: standard library only, Python 3.9 syntax and semantics."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support_remote import oldest_python

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCH_DIR = REPO_ROOT / "rigforge" / "bench"
BENCH_FILES = sorted(BENCH_DIR.glob("*.py"))


def imported_modules(path: Path) -> set[str]:
    """Top-level names of every module a file imports (relative imports count as rigforge)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add("rigforge.bench" if node.level else (node.module or ""))
    return names


def test_bench_imports_only_the_standard_library_and_itself() -> None:
    assert len(BENCH_FILES) >= 8
    for path in BENCH_FILES:
        for name in imported_modules(path):
            top = name.split(".")[0]
            assert top in sys.stdlib_module_names or name.startswith("rigforge.bench"), f"{path.name} imports {name}"


def test_every_bench_module_defers_annotations() -> None:
    # Annotations like `int | None` are evaluated at import time on 3.9 unless deferred.
    for path in BENCH_FILES:
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        futures = {alias.name for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names}
        assert "annotations" in futures, path.name


def test_package_init_stays_import_free() -> None:
    tree = ast.parse((REPO_ROOT / "rigforge" / "__init__.py").read_text())
    assert not [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def test_every_bench_module_imports_on_the_oldest_python(tmp_path: Path) -> None:
    python = oldest_python()
    upload = tmp_path / "rigforge"
    upload.mkdir()
    shutil.copy(REPO_ROOT / "rigforge" / "__init__.py", upload / "__init__.py")
    shutil.copytree(BENCH_DIR, upload / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    modules = [f"rigforge.bench.{path.stem}" for path in BENCH_FILES if path.stem not in ("__init__", "__main__")]
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    completed = subprocess.run(
        [python, "-E", "-s", "-c", code, *modules], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 0, completed.stderr
