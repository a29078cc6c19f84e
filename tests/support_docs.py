"""Checks that keep the README and docs/ true to the repository: links, deploys, switches, profile fields.

Each problem is one line naming the file, the line and what is wrong, e.g.
``docs/recipes.md:72: link ../README.md#k46: README.md has no heading #k46``.

What is checked, per page:

- a relative link (``[text](path#anchor)``, images and reference definitions too) names a file or folder that
  exists, and an ``#anchor`` that the target markdown page has (GitHub's heading slugs, or an ``<a id>``);
- a deploy named as ``deploys/<x>.py`` exists;
- a ``--data name=value`` switch is one rigforge accepts (rigforge.context.RUN_SWITCHES);
- a profile setting written in backticks as a dotted path whose first part is a profile section
  (``engine.recipes``, ``bench.floors[].concurrency``) is one the profile's JSON Schema has.

Fenced code blocks count for deploys and switches (commands are where they are written), not for links, headings
and settings (their text is a shell's or a YAML file's, not the page's).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']""")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_DEPLOY = re.compile(r"(?<![\w/.-])deploys/([A-Za-z0-9_.-]+?)\.py\b")
_SWITCH = re.compile(r"--data[ =]([A-Za-z_][A-Za-z0-9_]*)=([^\s`'\"]*)")
_DOTTED = re.compile(r"^[a-z_][a-z0-9_]*(\.[^\s.]+)+$")
#: Dotted names in backticks that are file names, not settings (``bench.py``, ``model.safetensors``).
_FILE_SUFFIXES = {"py", "md", "json", "png", "yaml", "yml", "txt", "sh", "service", "conf", "xml", "io", "j2",
                  "log", "csv", "html", "toml", "safetensors", "gguf", "patch", "cfg", "timer", "pub", "deb"}
_BRACKETS = re.compile(r"^(?P<name>.*?)(?P<items>(\[\d*\])*)$")


@dataclass(frozen=True)
class Repository:
    """What the pages are checked against: the tree, the accepted switches and the profile's schema."""

    root: Path
    switches: frozenset[str]
    schema: dict[str, Any]


def doc_pages(root: Path) -> list[Path]:
    """The README and every page under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def check_page(path: Path, text: str, repo: Repository) -> list[str]:
    """Every problem of the page at ``path`` (whose content is ``text``), one line each."""
    where = path.relative_to(repo.root).as_posix()
    problems: list[str] = []
    for number, line, in_code in _lines(text):
        for name in _DEPLOY.findall(line):
            if not (repo.root / "deploys" / f"{name}.py").is_file():
                problems.append(f"{where}:{number}: deploys/{name}.py: no such deploy")
        for name, value in _SWITCH.findall(line):
            if name not in repo.switches and (name, value) != ("key", "value"):  # the form itself, as the docs name it
                problems.append(f"{where}:{number}: --data {name}=: not a switch rigforge accepts "
                                f"({', '.join(sorted(repo.switches))})")
        if in_code:
            continue
        for target in [*_LINK.findall(_CODE_SPAN.sub(_blank, line)), *_REFERENCE.findall(line)]:
            problem = _link_problem(path, text, target, repo.root)
            if problem:
                problems.append(f"{where}:{number}: link {target}: {problem}")
        for span in _CODE_SPAN.findall(line):
            if _is_setting(span, repo.schema) and not has_setting(repo.schema, span.split(".")):
                problems.append(f"{where}:{number}: `{span}`: no such profile setting (docs/settings.md lists them)")
    return problems


def _lines(text: str) -> list[tuple[int, str, bool]]:
    """(line number, line, inside a code block) for each line of a markdown page."""
    out, fence = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        opened = _FENCE.match(line)
        if opened and (fence is None or opened.group(1) == fence):
            fence = opened.group(1) if fence is None else None
            out.append((number, line, True))
            continue
        out.append((number, line, fence is not None))
    return out


def _blank(match: re.Match[str]) -> str:
    return " " * len(match.group(0))


def anchors(text: str) -> set[str]:
    """The ``#anchors`` a markdown page has: its headings as GitHub slugs them, and ``<a id>`` / ``<a name>``.

    >>> sorted(anchors("# K=64\\n## The `engine.auth` key (new!)\\n## K=64\\n"))
    ['k64', 'k64-1', 'the-engineauth-key-new']
    """
    found: set[str] = set()
    for _, line, in_code in _lines(text):
        found.update(_HTML_ANCHOR.findall(line))
        heading = None if in_code else _HEADING.match(line)
        if heading is None:
            continue
        slug = github_slug(heading.group(2))
        unique, count = slug, 0
        while unique in found:
            count += 1
            unique = f"{slug}-{count}"
        found.add(unique)
    return found


def github_slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lowercase, punctuation but '-' and '_' dropped, spaces to '-'.

    >>> github_slug("Taking over a rig you built by hand")
    'taking-over-a-rig-you-built-by-hand'
    >>> github_slug("The NCCL graph XML (8x-turin)")
    'the-nccl-graph-xml-8x-turin'
    """
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _link_problem(page: Path, text: str, target: str, root: Path) -> str | None:
    if _SCHEME.match(target) or target.startswith("//"):
        return None  # a web address: not checked here (no network in the unit tests)
    file_part, _, anchor = target.partition("#")
    linked = (page.parent / file_part).resolve() if file_part else page
    if file_part and not linked.exists():
        shown = linked.relative_to(root) if linked.is_relative_to(root) else linked
        return f"no such file {shown}"
    if not anchor or linked.suffix != ".md":
        return None
    target_text = text if linked == page else linked.read_text()
    if anchor not in anchors(target_text):
        name = linked.relative_to(root).as_posix() if linked.is_relative_to(root) else linked.name
        return f"{name} has no heading #{anchor}"
    return None


def _is_setting(span: str, schema: dict[str, Any]) -> bool:
    """A backticked dotted name that starts with a profile section and is not a file name."""
    if not _DOTTED.match(span):
        return False
    first, *_, last = span.split(".")
    return first in schema["properties"] and last.lower() not in _FILE_SUFFIXES


def has_setting(schema: dict[str, Any], parts: list[str]) -> bool:
    """Whether the schema has the setting ``parts`` names (``["bench", "floors[]", "concurrency"]``).

    A key of a mapping is any key the mapping allows (``<name>`` stands for one); a list's entries are reached
    with ``[]`` or straight through (``bench.floors.concurrency``).
    """
    node: dict[str, Any] | None = schema
    for part in parts:
        found = _BRACKETS.match(part)
        assert found is not None
        node = _step(node, found.group("name")) if node is not None else None
        for _ in re.findall(r"\[\d*\]", found.group("items")):
            node = _items(node) if node is not None else None
        if node is None:
            return False
    return True


def _members(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *node.get("anyOf", [])]


def _step(node: dict[str, Any], name: str) -> dict[str, Any] | None:
    for member in _members(node):
        if name in member.get("properties", {}):
            return member["properties"][name]
        allowed = member.get("additionalProperties", "properties" not in member and member.get("type") == "object")
        names = member.get("propertyNames", {})
        if allowed is not False and "properties" not in member and (
                re.fullmatch(r"<[a-z_-]+>", name) or re.search(names.get("pattern", ""), name)):
            return allowed if isinstance(allowed, dict) else {}
        if "items" in member:
            return _step(member["items"], name)
    return None


def _items(node: dict[str, Any]) -> dict[str, Any] | None:
    return next((member["items"] for member in _members(node) if "items" in member), None)
