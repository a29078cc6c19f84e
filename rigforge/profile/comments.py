"""What the profile files and the profile models say about each setting, read from their comments.

A setting's meaning is written once: in the comment above it in ``base.yaml`` or ``gpu-rig.yaml`` (with the
``source:`` that value comes from), else in the comment beside its field in the model's class. The JSON Schema
(``rigforge.profile.json_schema``) and the settings page (``rigforge.profile.settings_page``) both read it here.

Example::

    notes = yaml_comments(PROFILES_DIR / "base.yaml")
    notes[("apt", "lock_wait_minutes")].meaning   # 'Minutes an apt operation waits while …'
"""

from __future__ import annotations

import inspect
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rigforge.profile.loader import PROFILES_DIR

Path_ = tuple[str, ...]
#: The profile files whose comments say what each setting means: every setting is declared in one of them.
DECLARING_FILES = ("base", "gpu-rig")
#: The command that writes the schema and the settings page from these notes.
REGENERATE = "python -m rigforge.profile.json_schema"

#: Where a comment turns from what a setting means to where its value comes from.
_SOURCE = re.compile(r"(?:^|(?<=\s))(?:[Nn]o )?source:")
_KEY_LINE = re.compile(r"""^(?P<indent> *)(?P<key>"[^"]+"|'[^']+'|[^\s#'"{\[-][^:#]*?|--[^\s:]+):(?:\s|$)""")
_LIST_ITEM = re.compile(r"^(?P<indent> *)- ")
_FIELD_LINE = re.compile(r"^\s+(?P<name>[a-z_][a-z0-9_]*)\s*:")


@dataclass(frozen=True)
class Comment:
    """A comment above a setting, split where it starts citing its source."""

    meaning: str
    source: str

    @classmethod
    def parse(cls, text: str) -> Comment:
        """
        >>> Comment.parse("What that override sets. source: rig-facts §1.5 — the exact string.")
        Comment(meaning='What that override sets.', source='source: rig-facts §1.5 — the exact string.')
        """
        found = _SOURCE.search(text)
        if found is None:
            return cls(text.strip(), "")
        return cls(text[: found.start()].strip(), text[found.start():].strip())

    @property
    def text(self) -> str:
        return f"{self.meaning} {self.source}".strip()


@dataclass
class Notes:
    """What the declaring files say about each setting, and the code's comments as the fallback."""

    comments: dict[str, dict[Path_, Comment]] = field(default_factory=dict)  # file stem -> path -> comment
    values: dict[str, dict[str, Any]] = field(default_factory=dict)  # file stem -> its settings

    @classmethod
    def read(cls, profiles_dir: Path = PROFILES_DIR) -> Notes:
        notes = cls()
        for stem in DECLARING_FILES:
            path = profiles_dir / f"{stem}.yaml"
            notes.comments[stem] = yaml_comments(path)
            notes.values[stem] = yaml.safe_load(path.read_text())
        return notes

    def meaning(self, path: Path_, code: str) -> str:
        """The first file's meaning of ``path``, else ``code`` (the comment in the model's class)."""
        for stem in DECLARING_FILES:
            comment = self.comments[stem].get(path)
            if comment is not None and comment.meaning:
                return comment.meaning
        return code


def yaml_comments(path: Path) -> dict[Path_, Comment]:
    """The comment block right above each key of a profile file, by the key's path.

    + path: a profile file; a comment separated from the next key by a blank line belongs to no key, and
      keys inside list items are not settings of their own (their comments are left out)

    Example: ``yaml_comments(Path("inventory/profiles/gpu-rig.yaml"))[("gpus", "model")].source``
    """
    found: dict[Path_, Comment] = {}
    stack: list[tuple[int, str | None]] = []  # (indent, key); None: inside a list item
    block: list[str] = []
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            block.append(stripped.lstrip("#").strip())
            continue
        key_line, item = _KEY_LINE.match(line), _LIST_ITEM.match(line)
        if key_line is None and item is None:
            block = []  # a blank line or a continued value: the block above belongs to no key
            continue
        indent = len((key_line or item).group("indent"))  # type: ignore[union-attr]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if item is not None:
            stack.append((indent, None))
        elif key_line is not None and all(key is not None for _, key in stack):
            key = key_line.group("key").strip("\"'")
            stack.append((indent, key))
            if block and stack != [(0, "extends")]:  # the file's own header sits above extends
                found[tuple(key for _, key in stack)] = Comment.parse(" ".join(block))  # type: ignore[misc]
        block = []
    return found


def field_comments(model: type) -> dict[str, str]:
    """The comments a model class gives its fields: the block right above a field, or the one beside it.

    + model: a pydantic model class of the profile

    Example: ``field_comments(Gpus)["topology"]  # 'worst link between any two GPUs'``
    """
    source = inspect.getsource(model)
    lines = source.splitlines()
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
    found: dict[str, str] = {}
    fields = getattr(model, "model_fields", {})
    for number, line in enumerate(lines, start=1):
        field = _FIELD_LINE.match(line)
        if field is None or field.group("name") not in fields or line.lstrip().startswith("#"):
            continue
        above = []
        previous = number - 1
        while previous in comments and lines[previous - 1].lstrip().startswith("#"):
            above.insert(0, comments[previous])
            previous -= 1
        text = " ".join(above) or comments.get(number, "")
        if text:
            found[field.group("name")] = text
    return found
