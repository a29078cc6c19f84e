"""Every import points down rigforge's layers, and the contract that says so fails on an import that does not.

The layers are pyproject.toml's import-linter contracts (``[tool.importlinter]``); ``lint-imports`` runs them in
scripts/test's lint step. Here they run on this tree, and on a copy of it with one import planted that points
up (the kind the layout once had: the engine's key reaching up into the operations for its folder), with a new
loose module that no layer names, and with a cycle: each must fail, naming what broke it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support_layout import REPO, TABLE_END, TABLE_START, layer_of, layers, layout_table, may_import

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the tree at ``root`` (its rigforge/ and roles/ imported from there, not installed)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")], cwd=root,
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    for name in ("rigforge", "roles"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def plant(path: Path, line: str) -> None:
    text = path.read_text()
    head, marker, rest = text.partition("from __future__ import annotations\n")
    path.write_text(head + marker + line + "\n" + rest if marker else line + "\n" + text)


def test_this_tree_keeps_every_contract() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_planted_upward_import_breaks_the_layers(tree_copy: Path) -> None:
    plant(tree_copy / "rigforge" / "serving" / "api_key.py", "from rigforge.operations.secrets import KEY_BYTES")
    result = lint_imports(tree_copy)
    assert result.returncode != 0
    assert "rigforge's packages import only the layers below them BROKEN" in result.stdout
    assert "rigforge.serving.api_key -> rigforge.operations.secrets" in result.stdout


def test_a_role_imported_by_rigforge_breaks_the_contract(tree_copy: Path) -> None:
    plant(tree_copy / "rigforge" / "context.py", "from roles import base")
    result = lint_imports(tree_copy)
    assert result.returncode != 0
    assert "Roles use rigforge; rigforge never imports a role BROKEN" in result.stdout


def test_a_loose_module_without_a_layer_breaks_the_contract(tree_copy: Path) -> None:
    (tree_copy / "rigforge" / "helpers.py").write_text('"""Somewhere to put things."""\n')
    result = lint_imports(tree_copy)
    assert result.returncode != 0
    assert "rigforge.helpers" in result.stdout


def test_a_cycle_inside_a_package_breaks_the_contract(tree_copy: Path) -> None:
    plant(tree_copy / "rigforge" / "images" / "git_refs.py", "from rigforge.images import plans")
    result = lint_imports(tree_copy)
    assert result.returncode != 0
    assert "No import cycle among the modules of any package BROKEN" in result.stdout


def test_rigforge_keeps_at_most_six_loose_modules() -> None:
    loose = sorted(path.name for path in (REPO / "rigforge").glob("*.py") if path.name != "__init__.py")
    assert len(loose) <= 6, loose


def test_every_package_says_what_it_may_import_and_names_only_lower_layers() -> None:
    packages = [name for line in layers() for name in line if (REPO / "rigforge" / name).is_dir()]
    for name in packages:
        named = may_import(name)
        assert named is not None, f"rigforge/{name}/__init__.py: no 'May import:' paragraph"
        above = [other for other in named if layer_of(other) <= layer_of(name)]
        assert not above, f"rigforge/{name}/__init__.py may not import {above}: not below it in pyproject.toml"


def test_the_design_page_shows_the_layout_table_as_generated() -> None:
    page = (REPO / "docs" / "design.md").read_text()
    shown = page.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip()
    assert shown == layout_table(), "docs/design.md: regenerate the layout table with python -m tests.support_layout"
