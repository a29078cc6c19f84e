"""Render the files rigforge writes on a rig: one template each, one managed-by header, one quoting helper."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import jinja2

from rigforge.profile import Profile

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"


def header_text(profile: Profile) -> str:
    """The tool-owned marker every managed file carries."""
    return f"managed by rigforge, profile {profile.name} — do not edit"


def shell_quote(value: Any) -> str:
    """Quote one word for sh and for systemd's ExecStart (both accept POSIX single quotes)."""
    return shlex.quote(str(value))


def flag_value(value: Any) -> str:
    """A launch-flag value as the engine expects it: mappings as compact JSON, others as text."""
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["shell_quote"] = shell_quote
    env.filters["flag_value"] = flag_value
    env.filters["pretty_json"] = lambda v, sort_keys=True: json.dumps(v, indent=2, sort_keys=sort_keys,
                                                                       ensure_ascii=False)
    return env


_ENV = _environment()


def render(template: str, profile: Profile, **context: Any) -> str:
    """Render ``templates/<template>`` with the profile, its header and extra context.

    + template: path under ``templates/`` (e.g. ``modprobe/module.conf.j2``)
    + profile: the host's validated profile
    + context: values the template needs beyond the profile

    Example: ``render("nccl/nccl.conf.j2", profile, env=profile.nccl.env)``
    """
    return _ENV.get_template(template).render(profile=profile, header=header_text(profile), **context)


def render_with_exports(template: str, profile: Profile, **context: Any) -> tuple[str, dict[str, Any]]:
    """Render like ``render`` and also return what the template declares at its top level (``{% set %}``).

    Example: ``text, exports = render_with_exports("images/vllm.Dockerfile.j2", profile, args=args)`` — the
    Dockerfile templates declare their git checkouts as ``git_sources``.
    """
    module = _ENV.get_template(template).make_module({"profile": profile, "header": header_text(profile), **context})
    exports = {name: getattr(module, name) for name in dir(module) if not name.startswith("_")}
    return str(module), exports


#: A Grafana time-series panel's spec: title, unit, then (legend, PromQL expression) per line.
PanelSpec = tuple[str, str, list[tuple[str, str]]]


def timeseries_panels(specs: list[PanelSpec], first_id: int, first_y: int) -> list[dict[str, object]]:
    """Grafana time-series panels (dashboard JSON) for ``specs``, two a row from grid row ``first_y``.

    + specs: (title, unit, [(legend, expression), ...]) per panel
    + first_id: the first panel's id (a dashboard's ids must differ)
    + first_y: the grid row the first panel starts on

    >>> [panel["gridPos"] for panel in timeseries_panels([("a", "s", []), ("b", "s", []), ("c", "s", [])], 1, 0)]
    [{'h': 8, 'w': 12, 'x': 0, 'y': 0}, {'h': 8, 'w': 12, 'x': 12, 'y': 0}, {'h': 8, 'w': 12, 'x': 0, 'y': 8}]
    """
    return [{"id": first_id + index, "type": "timeseries", "title": title,
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": first_y + 8 * (index // 2)},
             "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
             "targets": [{"refId": chr(ord("A") + n), "expr": expr, "legendFormat": legend}
                         for n, (legend, expr) in enumerate(lines)]}
            for index, (title, unit, lines) in enumerate(specs)]
