"""The known-failure signatures file: its schema, and a loader whose errors name file, entry and field.

    signatures = load_signatures()            # inventory/known-failures.yaml, validated once
    data = [s.as_data() for s in signatures]  # plain mappings for rigforge.known_failures.match

Each entry is checked as it loads: its pattern compiles, each of its example lines (real lines, as the
source quotes them) holds the needle and matches the pattern, and each profile field it names exists in
the profile schema. A bad entry stops with ``inventory/known-failures.yaml: entry 3 (aer-...): pattern:
...``, before anything reads a log.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, ValidationInfo, field_validator

from rigforge.profile import Profile
from rigforge.profile.loader import ProfileError, _display, read_yaml

SIGNATURES_FILE = Path(__file__).resolve().parents[2] / "inventory" / "known-failures.yaml"

Where = Literal["kernel", "engine", "startup", "bench"]
Severity = Literal["blocking", "fail", "warn"]
Text = Annotated[str, StringConstraints(min_length=1, max_length=400)]
#: A pattern is written for a program's whole family of messages: several of its format strings.
PatternText = Annotated[str, StringConstraints(min_length=1, max_length=1000)]
#: A source names every public page its lines come from.
Sources = Annotated[str, StringConstraints(min_length=1, max_length=1000)]


class KnownFailureError(ProfileError):
    """The signatures file is wrong; raised before any log is read."""


class Signature(BaseModel):
    """One known failure: where it shows, the line that gives it away, its cause and its fix.

    + id: stable name (`xid-79-fallen-off-bus`)
    + where: the logs it shows in (kernel, engine, startup, bench)
    + needle: fixed text every matching line holds (the rig filters on it before sending lines); a list
      when the failure prints more than one way (a matching line holds one of them)
    + pattern: Python regular expression searched in a line
    + hang_only: the line is normal unless the engine hung right after it (see the YAML header)
    + explains: False when the line says that something failed, not why (a unit's failed result, an engine's
      core that died): the log's unrecognised error lines are still shown beside it
    + severity: blocking (wedged GPU or link), fail, warn
    + severity_by: the severity a value of one of the pattern's named groups sets instead (Xid 154's carried
      ``action``: ``None`` is warn, a reset is blocking)
    + cause, fix: in words, from the source
    + profile_fields: dotted profile settings the fix changes
    + source: where cause and fix come from
    + examples: real lines the pattern must match
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{2,60}$")]
    where: Annotated[list[Where], Field(min_length=1)]
    needle: Text | Annotated[list[Text], Field(min_length=1)]
    pattern: PatternText
    hang_only: bool = False
    explains: bool = True
    severity: Severity
    severity_by: dict[str, dict[str, Severity]] = {}
    cause: Text
    fix: Text
    profile_fields: list[str] = []
    source: Sources
    examples: Annotated[list[Text], Field(min_length=1)]

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{pattern!r} does not compile: {exc}") from None
        return pattern

    @field_validator("severity_by")
    @classmethod
    def _groups_exist(cls, table: dict[str, dict[str, str]], info: ValidationInfo) -> dict[str, dict[str, str]]:
        pattern = info.data.get("pattern")
        if pattern is None:
            return table  # already reported on its own field
        missing = sorted(set(table) - set(re.compile(pattern).groupindex))
        if missing:
            raise ValueError(f"{missing[0]!r} is not a named group of the pattern")
        return table

    @field_validator("profile_fields")
    @classmethod
    def _are_settings(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if not profile_field_exists(path):
                raise ValueError(f"{path!r} is not a profile setting")
        return paths

    @field_validator("examples")
    @classmethod
    def _match(cls, examples: list[str], info: ValidationInfo) -> list[str]:
        needle, pattern = info.data.get("needle"), info.data.get("pattern")
        if needle is None or pattern is None:
            return examples  # already reported on its own field
        words = [needle] if isinstance(needle, str) else needle
        for line in examples:
            if not any(word in line for word in words) or not re.search(pattern, line):
                raise ValueError(f"{line!r} does not hold needle {needle!r} and match pattern {pattern!r}")
        return examples

    def as_data(self) -> dict[str, Any]:
        """The fields the matcher reads, as plain JSON-able data."""
        return self.model_dump(mode="json")


class SignaturesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    signatures: list[Signature]


def profile_field_exists(path: str) -> bool:
    """True when a dotted path names a setting of the profile schema (`boot.kernel_params`).

    >>> profile_field_exists("engine.port"), profile_field_exists("engine.prot")
    (True, False)
    """
    model: Any = Profile
    for part in path.split("."):
        fields = getattr(model, "model_fields", None)
        if fields is None or part not in fields:
            return False
        model = _inner_model(fields[part].annotation)
    return True


def _inner_model(annotation: Any) -> Any:
    """The pydantic model inside ``X | None`` (or the annotation itself)."""
    for candidate in getattr(annotation, "__args__", ()) or (annotation,):
        if hasattr(candidate, "model_fields"):
            return candidate
    return annotation


def load_signatures(path: Path = SIGNATURES_FILE) -> tuple[Signature, ...]:
    """Read and validate a signatures file; every error names the file, the entry and the field.

    + path: the YAML file (default: inventory/known-failures.yaml)

    Example: ``load_signatures()[0].id == "xid-79-fallen-off-bus"``
    """
    try:
        data = read_yaml(path)
    except ProfileError as exc:
        raise KnownFailureError(str(exc)) from None
    try:
        signatures = SignaturesFile.model_validate(data).signatures
    except ValidationError as exc:
        raise KnownFailureError(_explain(exc, data, _display(path))) from None
    seen: set[str] = set()
    for index, signature in enumerate(signatures, 1):
        if signature.id in seen:
            raise KnownFailureError(f"{_display(path)}: entry {index} ({signature.id}): id: used twice")
        seen.add(signature.id)
    return tuple(signatures)


def _explain(exc: ValidationError, data: dict[str, Any], source: str) -> str:
    """`file: entry 3 (id): field: message (got ...)` for the first error."""
    error = exc.errors(include_url=False)[0]
    loc = [str(part) for part in error["loc"]]
    if len(loc) < 2 or loc[0] != "signatures":
        return f"{source}: {'.'.join(loc) or '(top level)'}: {error['msg']}"
    index = int(loc[1])
    entry = (data.get("signatures") or [])[index]
    name = entry.get("id", "?") if isinstance(entry, dict) else "?"
    field = ".".join(loc[2:]) or "(entry)"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] not in ("missing", "value_error"):
        message = f"{message} (got {error['input']!r})"
    return f"{source}: entry {index + 1} ({name}): {field}: {message}"


@lru_cache(maxsize=1)
def known_signatures() -> tuple[Signature, ...]:
    """The project's signatures, loaded once per process."""
    return load_signatures()


def signature_data(where: Where | None = None) -> list[dict[str, Any]]:
    """The project's signatures as plain mappings (those shown in ``where``, or all)."""
    return [signature.as_data() for signature in known_signatures() if where is None or where in signature.where]


def needles(where: Where) -> list[str]:
    """The distinct needles of the signatures shown in ``where``, in file order (for the rig's grep -F)."""
    return list(dict.fromkeys(needle for s in known_signatures() if where in s.where and not s.hang_only
                              for needle in ([s.needle] if isinstance(s.needle, str) else s.needle)))
