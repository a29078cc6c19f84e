"""rigforge's modules import each other without cycles, counting imports inside functions too.

A cycle hidden behind a function-level import works until someone moves that import to the top; the
layering (a command line above what it runs, rendering above what it renders) is kept by this test.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "rigforge"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The rigforge modules a file imports anywhere in it (``from a import b`` counts a.b when it is a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name in known}


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    known = set(paths)
    return {name: imported_modules(path, known) - {name} for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as a list of modules, or [] when there is none."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(name: str) -> list[str]:
        state[name] = "open"
        stack.append(name)
        for target in sorted(graph.get(name, set())):
            if target.startswith(name + "."):
                continue  # a package importing its own submodule is how packages re-export
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[name] = "done"
        return []

    for name in sorted(graph):
        if name not in state and (cycle := visit(name)):
            return cycle
    return []


def test_the_updates_package_has_no_import_cycle() -> None:
    graph = import_graph()
    updates = {name: targets for name, targets in graph.items() if name.startswith("rigforge.updates")}
    assert find_cycle(updates) == []


def test_a_cycle_is_found() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_rigforge_has_no_import_cycle() -> None:
    assert find_cycle(import_graph()) == []
