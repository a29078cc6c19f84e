"""/etc/nccl.conf as NCCL reads it: every NCCL program on the host applies its ``KEY=value`` lines at
communicator init (a variable already in the process's environment wins).

    conf = host.get_fact(NcclConf)          # None: no such file
    conf.settings.get("NCCL_GRAPH_FILE")    # what every NCCL program on the rig is given
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from pyinfra.api import FactBase

from rigforge.facts.managed import MARKER_TEXT

NCCL_CONF = "/etc/nccl.conf"
OURS, OTHER = "## rigforge", "## other"


@dataclass(frozen=True)
class NcclConfFile:
    """An NCCL configuration file: whether rigforge wrote it, and the variables it sets, in file order.

    + ours: it carries rigforge's managed-by header
    + settings: ``KEY -> value`` of each line NCCL applies (a line with ``=`` that is not a comment)
    """

    ours: bool
    settings: dict[str, str]


def parse_nccl_conf(lines: list[str]) -> NcclConfFile:
    """The fact's output: ``## rigforge`` or ``## other``, then the file's lines.

    NCCL splits each line at its first ``=`` and skips lines without one; rigforge's own comment lines have
    none, and a ``#`` line is a comment here.

    >>> parse_nccl_conf(["## rigforge", "# managed by rigforge", "NCCL_P2P_LEVEL=SYS", ""]).settings
    {'NCCL_P2P_LEVEL': 'SYS'}
    """
    if not lines or lines[0] not in (OURS, OTHER):
        raise ValueError(f"NcclConf: expected {OURS!r} or {OTHER!r} first, got {lines[:1]!r}")
    settings: dict[str, str] = {}
    for line in lines[1:]:
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.lstrip().startswith("#"):
            settings[key.strip()] = value
    return NcclConfFile(ours=lines[0] == OURS, settings=settings)


class NcclConf(FactBase[NcclConfFile | None]):
    """
    Returns ``path`` (default /etc/nccl.conf) as an ``NcclConfFile``, or None when there is no such file.

    + path: the NCCL configuration file to read

    .. code:: python

        conf = host.get_fact(NcclConf)
        if conf and "NCCL_GRAPH_FILE" in conf.settings:
            ...
    """

    def command(self, path: str = NCCL_CONF) -> str:
        quoted = shlex.quote(path)
        return (f"if [ -f {quoted} ]; then if grep -q -e {shlex.quote(MARKER_TEXT)} {quoted}; then echo '{OURS}'; "
                f"else echo '{OTHER}'; fi; cat {quoted}; fi")

    @staticmethod
    def default() -> None:
        return None

    def process(self, output: list[str]) -> NcclConfFile:
        return parse_nccl_conf(output)
