"""NCCL role: /etc/nccl.conf, the engine's environment file, and the NCCL graph XML where asked for.

- ``/etc/nccl.conf`` holds the profile's ``NCCL_*`` settings (NCCL reads it at communicator init; a
  process's own environment wins). Values are strings such as ``SYS``, never P2P level numbers, whose
  meaning changed between NCCL releases (rig-facts §10; the schema refuses numbers). Every NCCL program on
  the rig reads it, so it never names the graph XML: a rig provisioned when it did loses that line on the
  next run, and nothing else of the file changes.
- ``/etc/rigforge/engine.env`` (``ENGINE_ENV_FILE``) is the engine service's ``EnvironmentFile=`` and
  ``docker --env-file``: the rig's NCCL settings, and ``NCCL_GRAPH_FILE`` when the graph XML is on (the engine's
  own variables are in its unit, ``docker run -e`` after this file). Both readers take ``KEY=value`` lines, but
  systemd strips quotes and backslashes that docker keeps; a value that the two would read differently is
  refused here with the variable's name. It is written for every profile (the engine service reads it even
  where there is no NCCL), mode 0640: it may carry tokens.
- The graph XML (rig-facts §5) is an 8-rank graph for AMD Turin/Genoa; it is written to
  ``nccl.graph_path`` only when ``nccl.graph_xml`` is set (8x Turin), never on 2- or 4-GPU rigs. NCCL fails
  the init of any communicator that lacks one of its 8 GPUs (tests/fixtures/nccl/), so it reaches the engine
  alone, and the schema refuses engine layouts with smaller groups (``rigforge.profile.nccl_layout``).
  Nothing here restarts the engine: the service role does that when the environment file changes. None of
  these files needs a reboot.
"""

from __future__ import annotations

import posixpath

from pyinfra.api import deploy
from pyinfra.operations import files

from rigforge.context import current_profile
from rigforge.facts.nccl import NCCL_CONF
from rigforge.operations.files import managed_file
from rigforge.operations.managed import absent
from rigforge.profile import Profile
from rigforge.profile.loader import ProfileError
from rigforge.profile.nccl_layout import GRAPH_GPUS, GRAPH_RINGS
from rigforge.render import render
from rigforge.serving.engines import engine_env_file_variables

STATE_DIR = "/etc/rigforge"
#: The engine service's environment file (systemd ``EnvironmentFile=``, ``docker --env-file``).
ENGINE_ENV_FILE = f"{STATE_DIR}/engine.env"
_AMBIGUOUS_CHARS = ('"', "'", "\\")


def nccl_settings(profile: Profile) -> dict[str, str]:
    """The ``NCCL_*`` settings of /etc/nccl.conf: the profile's ``nccl.env`` (never the graph file)."""
    if profile.nccl is None:
        return {}
    return {key: value for key, value in profile.nccl.env.items() if key.startswith("NCCL_")}


def engine_environment(profile: Profile) -> dict[str, str]:
    """The engine env file's variables: the rig's ``nccl.env`` and the graph file (rigforge/serving/engines.py), checked
    for the file. The engine's own variables (a recipe's) are in its unit, where they win over this file."""
    variables = engine_env_file_variables(profile)
    for key, value in variables.items():
        if value != value.strip() or any(char in value for char in _AMBIGUOUS_CHARS):
            raise ProfileError(f"{key}={value!r}: systemd and docker would read this value differently in "
                               f"{ENGINE_ENV_FILE} (no quotes, backslashes or surrounding spaces)")
    return variables


def render_nccl_files(profile: Profile) -> dict[str, str]:
    """The engine environment, nccl.conf and (when asked for) the graph XML: path -> content."""
    rendered = {ENGINE_ENV_FILE: render("nccl/engine.env.j2", profile, variables=engine_environment(profile))}
    if profile.nccl is not None:
        rendered[NCCL_CONF] = render("nccl/nccl.conf.j2", profile, settings=nccl_settings(profile))
        if profile.nccl.graph_xml:
            rendered[profile.nccl.graph_path] = render("nccl/nccl_graph_opt.xml.j2", profile, rings=GRAPH_RINGS,
                                                       gpus=GRAPH_GPUS)
    return rendered


@deploy("NCCL and engine environment")
def apply_nccl() -> None:
    """Write the engine environment, nccl.conf and the graph XML; remove the ones the profile dropped."""
    profile = current_profile()
    rendered = render_nccl_files(profile)
    files.directory(name=f"Create {STATE_DIR}", path=STATE_DIR, mode="755", user="root", group="root")
    managed_file(name=f"Write the engine environment {ENGINE_ENV_FILE}", dest=ENGINE_ENV_FILE,
                 content=rendered[ENGINE_ENV_FILE], mode="640")
    if NCCL_CONF in rendered:
        managed_file(name=f"Write {NCCL_CONF}", dest=NCCL_CONF, content=rendered[NCCL_CONF])
    else:
        absent(name=f"Remove {NCCL_CONF} (no NCCL in the profile)", path=NCCL_CONF)
    graph_path = profile.nccl.graph_path if profile.nccl else None
    if graph_path and graph_path in rendered:
        files.directory(name=f"Create {posixpath.dirname(graph_path)}", path=posixpath.dirname(graph_path))
        managed_file(name=f"Write the NCCL graph {graph_path}", dest=graph_path, content=rendered[graph_path])
    elif graph_path:
        absent(name=f"Remove {graph_path} (graph XML off)", path=graph_path)
