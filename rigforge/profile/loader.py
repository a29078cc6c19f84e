"""Load a rig profile: base file + rig file + per-host overrides, validated into a ``Profile``.

A profile file may name a parent with ``extends: <name>``; mappings merge key by key, anything else
(lists, scalars) replaces the parent's value. Every error names the file (or override source) that set
the offending value, the field path, what was given and what is allowed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, get_origin

import yaml
from pydantic import ValidationError
from pyinfra.api.exceptions import PyinfraError

from rigforge.profile import Profile
from rigforge.profile.recipes import recipe_location
from rigforge.profile.types import FieldError

PROFILES_DIR = Path(__file__).resolve().parents[2] / "inventory" / "profiles"

Origins = dict[tuple[str, ...], str]
#: The error type ``explain`` gives a ``FieldError``: its message already says what was given.
NAMED_FIELD = "named_field"


class ProfileError(PyinfraError):
    """A profile, inventory or CLI value is wrong; raised before any host is touched."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses duplicate keys instead of silently keeping the last one."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # ``<<: *anchor``: keys given beside it override the merged ones, as YAML says
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path) -> dict[str, Any]:
    """Read one profile file into a mapping, with file-named errors."""
    try:
        data = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass
    except FileNotFoundError as exc:
        raise ProfileError(f"{_display(path)}: no such profile file") from exc
    except yaml.MarkedYAMLError as exc:
        line = f"line {exc.problem_mark.line + 1}: " if exc.problem_mark else ""
        raise ProfileError(f"{_display(path)}: invalid YAML: {line}{exc.problem}") from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"{_display(path)}: invalid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{_display(path)}: expected a mapping of settings at the top level")
    return data


def merge(base: Mapping[str, Any], top: Mapping[str, Any], origins: Origins, source: str,
          prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    """Deep-merge ``top`` over ``base``, recording in ``origins`` which source set each path."""
    merged = dict(base)
    for key, value in top.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge(merged[key], value, origins, source, path)
        else:
            merged[key] = value
            for known in [p for p in origins if p[: len(path)] == path]:
                del origins[known]
            _record(value, path, origins, source)
    return merged


def _record(value: Any, path: tuple[str, ...], origins: Origins, source: str) -> None:
    origins[path] = source
    if isinstance(value, Mapping):
        for key, item in value.items():
            _record(item, (*path, str(key)), origins, source)


def resolve(name: str, profiles_dir: Path = PROFILES_DIR) -> tuple[dict[str, Any], Origins]:
    """Follow the ``extends`` chain of profile ``name`` and merge it, base first."""
    chain: list[tuple[Path, dict[str, Any]]] = []
    current: str | None = name
    while current is not None:
        path = profiles_dir / f"{current}.yaml"
        if any(p == path for p, _ in chain):
            raise ProfileError(f"{_display(path)}: extends: circular chain through {current!r}")
        data = read_yaml(path)
        parent = data.pop("extends", None)
        if parent is not None and not isinstance(parent, str):
            raise ProfileError(f"{_display(path)}: extends: expected a profile name, got {parent!r}")
        chain.append((path, data))
        current = parent
    merged: dict[str, Any] = {}
    origins: Origins = {}
    for path, data in reversed(chain):
        merged = merge(merged, data, origins, _display(path))
    merged["name"] = name
    origins[("name",)] = _display(profiles_dir / f"{name}.yaml")
    return merged, origins


def load_profile(name: str, overrides: Mapping[str, Any] | None = None,
                 overrides_source: str = "host data 'profile_overrides'",
                 profiles_dir: Path = PROFILES_DIR) -> Profile:
    """Load, merge and validate profile ``name``; raise ``ProfileError`` with one clear message.

    + name: profile file stem under ``inventory/profiles`` (e.g. ``2x-pix``)
    + overrides: per-host settings merged last (e.g. a test repo URL)
    + overrides_source: how to name the overrides in error messages

    Example: ``load_profile("2x-pix", {"engine": {"port": 8001}})``
    """
    if not isinstance(name, str) or not name.replace("-", "").replace("_", "").isalnum():
        raise ProfileError(f"profile name {name!r} is not a profile file name (letters, digits, - and _)")
    if overrides is not None and not isinstance(overrides, Mapping):
        raise ProfileError(f"{overrides_source}: expected a mapping of profile settings, got {overrides!r}")
    data, origins = resolve(name, profiles_dir)
    if overrides:
        data = merge(data, overrides, origins, overrides_source)
    default_source = _display(profiles_dir / f"{name}.yaml")
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(explain(exc, origins, default_source)) from None
    for recipe_name, recipe in profile.engine.recipes.items():
        # Each recipe is validated as the whole profile it makes; an error is named where the recipe set it.
        try:
            profile.with_recipe(recipe_name)
        except ValidationError as exc:
            relocate = _relocator(recipe_name, recipe)
            raise ProfileError(explain(exc, origins, default_source, relocate)) from None
    return profile


def _relocator(name: str, recipe: object) -> Callable[[tuple[str, ...]], tuple[str, ...]]:
    return lambda loc: recipe_location(loc, name, recipe)  # type: ignore[arg-type]


def explain(exc: ValidationError, origins: Origins, default_source: str,
            relocate: Callable[[tuple[str, ...]], tuple[str, ...]] | None = None) -> str:
    """Turn a pydantic error into 'file: field.path: what was wrong (got X)', first error first.

    + relocate: maps an error's field path to where it was set (a recipe's error in the profile it makes)
    """
    lines = []
    for loc, error in _one_error_per_field(exc):
        loc = relocate(loc) if relocate else loc
        field = ".".join(part for part in loc if part != "[key]") or "(top level)"
        source = _source_of(loc, origins, default_source)
        if error["type"] == "extra_forbidden":
            message = f"unknown setting; allowed here: {', '.join(_allowed_fields(loc[:-1]))}"
        elif error["type"] == NAMED_FIELD:
            message = error["msg"]
        else:
            message = error["msg"].removeprefix("Value error, ")
            shown = error["type"] != "missing" and not isinstance(error["input"], (dict, list))
            message = f"{message} (got {error['input']!r})" if shown else message
            message = f"invalid name: {message}" if loc[-1:] == ("[key]",) else message
        lines.append(f"{source}: {field}: {message}")
    more = f" (+{len(lines) - 1} more: {'; '.join(lines[1:])})" if len(lines) > 1 else ""
    return lines[0] + more


def _one_error_per_field(exc: ValidationError) -> list[tuple[tuple[str, ...], Any]]:
    """Pydantic reports a value that fits no member of a union once per member; keep the telling one."""
    chosen: dict[tuple[str, ...], Any] = {}
    for error in exc.errors(include_url=False):
        loc = tuple(str(part) for part in error["loc"] if not _is_union_member(str(part)))
        named = (error.get("ctx") or {}).get("error")
        if isinstance(named, FieldError):  # a check across sections, reported at the setting it names
            loc, error = named.loc, {**error, "type": NAMED_FIELD, "msg": str(named)}
        if loc not in chosen or error["type"] == "value_error":
            chosen[loc] = error
    return list(chosen.items())


def _is_union_member(part: str) -> bool:
    return part in {"bool", "int", "float", "str"} or ("[" in part and part != "[key]")


def profile_hash(profile: Profile) -> str:
    """A stable short hash of the applied settings, recorded on the rig."""
    canonical = json.dumps(profile.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _source_of(loc: tuple[str, ...], origins: Origins, default: str) -> str:
    for end in range(len(loc), 0, -1):
        if loc[:end] in origins:
            return origins[loc[:end]]
    return default


def _allowed_fields(loc: tuple[str, ...]) -> list[str]:
    model: Any = Profile
    keyed = False  # the previous field was a mapping of models: this part is one of its keys
    for part in loc:
        if keyed:
            keyed = False
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        keyed = get_origin(field.annotation) is dict
        model = _model_in(field.annotation)
    return sorted(getattr(model, "model_fields", {}))


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
