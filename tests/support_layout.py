"""rigforge's layers as pyproject.toml's import-linter contract states them, and the table docs/design.md shows.

The contract (``[tool.importlinter]``) is the one source: ``lint-imports`` enforces it, this module reads it to
draw the layout table and to check what each package's docstring says it may import. Regenerate the table with
``python -m tests.support_layout`` and paste it between the markers in docs/design.md (a unit test compares).

Example::

    layer_of("serving")      # 9: the line of the contract that names it (0 is the top)
    print(layout_table())
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: import-linter depends on tomli there
    import tomli as tomllib  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "rigforge"
TABLE_START = "<!-- layout table: python -m tests.support_layout -->"
TABLE_END = "<!-- end of layout table -->"
_MAY_IMPORT = re.compile(r"^May import: (.*?)(?:\n\n|\Z)", re.MULTILINE | re.DOTALL)


def contract(contract_id: str = "layers", pyproject: Path = REPO / "pyproject.toml") -> dict:
    """One contract of pyproject.toml's ``[tool.importlinter]``, by its id."""
    config = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]
    return next(item for item in config["contracts"] if item["id"] == contract_id)


def layers() -> list[list[str]]:
    """The contract's layers, top first, each a list of rigforge's top-level packages and modules."""
    return [[name.strip() for name in re.split(r"[|:]", line)] for line in contract()["layers"]]


def layer_of(name: str) -> int:
    """The index of the layer that holds ``name`` (a top-level package or module of rigforge)."""
    return next(index for index, line in enumerate(layers()) if name in line)


def source_of(name: str) -> Path:
    package = PACKAGE / name / "__init__.py"
    return package if package.exists() else PACKAGE / f"{name}.py"


def docstring(name: str) -> str:
    return ast.get_docstring(ast.parse(source_of(name).read_text())) or ""


def may_import(name: str) -> list[str] | None:
    """The rigforge packages the docstring's ``May import:`` paragraph names (None when it has none)."""
    match = _MAY_IMPORT.search(docstring(name))
    if match is None:
        return None
    known = {member for line in layers() for member in line}
    return [word for word in re.findall(r"[a-z_]+", match.group(1)) if word in known]


def owns(text: str) -> str:
    """The first sentence of a docstring, on one line."""
    paragraph = " ".join(text.split("\n\n")[0].split())
    sentence = re.split(r"(?<=[.?!]) (?=[A-Z`])", paragraph)[0]
    return sentence.replace("``", "`").replace("|", "\\|")


def files_and_lines(name: str) -> tuple[int, int]:
    paths = sorted((PACKAGE / name).rglob("*.py")) if (PACKAGE / name).is_dir() else [PACKAGE / f"{name}.py"]
    return len(paths), sum(len(path.read_text().splitlines()) for path in paths)


def layout_table() -> str:
    """The markdown table of rigforge's layers: each package or loose module, what it owns, what it may import."""
    rows = ["| layer | package / module | owns | may import |", "|---|---|---|---|"]
    roles = ast.get_docstring(ast.parse((REPO / "roles" / "__init__.py").read_text())) or ""
    rows.append(f"| 0 | `roles/` | {owns(roles)} | any layer below |")
    for index, line in enumerate(layers(), start=1):
        for name in line:
            path = source_of(name).relative_to(REPO)
            shown = f"`{path.parent}/`" if path.name == "__init__.py" else f"`{path}`"
            named = may_import(name)
            allowed = ("nothing of rigforge's" if named == [] else ", ".join(named) if named
                       else "any layer below")
            rows.append(f"| {index} | {shown} | {owns(docstring(name))} | {allowed} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(TABLE_START)
    print(layout_table())
    print(TABLE_END)
