"""Whether a file is rigforge's: it carries the managed-by header every file rigforge writes starts with.

The operations that remove a file the profile no longer wants ask this first, so that a file of the same
name the owner wrote is left alone. A converged rig asks it for every such file on every run, mostly of
files that do not exist: the test is the shell's own ``[ -e ]``, and ``grep`` runs only for a file that is
there (pyinfra's ``FindInFile`` forks ``grep`` and then ``find`` for each missing one).
"""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

MARKER_TEXT = "managed by rigforge"
MISSING, RIGFORGE, OTHER = "missing", "rigforge", "other"


def parse_managed(lines: list[str]) -> bool | None:
    """``missing`` → None, ``rigforge`` → True, ``other`` → False; anything else is an error naming the fact."""
    answer = "\n".join(lines).strip()
    if answer not in (MISSING, RIGFORGE, OTHER):
        raise ValueError(f"ManagedByRigforge: expected {MISSING}, {RIGFORGE} or {OTHER}, got {answer[:80]!r}")
    return None if answer == MISSING else answer == RIGFORGE


class ManagedByRigforge(FactBase[bool | None]):
    """
    Returns True when ``path`` carries rigforge's managed-by header, False when it exists without it (or
    cannot be read), None when there is no such file.

    + path: absolute path of a file rigforge may have written

    .. code:: python

        ours = host.get_fact(ManagedByRigforge, path="/etc/nccl.conf")
    """

    def command(self, path: str) -> str:
        quoted = shlex.quote(path)
        return (f"if [ -e {quoted} ] || [ -L {quoted} ]; then "
                f"if grep -q -e {shlex.quote(MARKER_TEXT)} {quoted} 2>/dev/null; then echo {RIGFORGE}; "
                f"else echo {OTHER}; fi; else echo {MISSING}; fi")

    def process(self, output: list[str]) -> bool | None:
        return parse_managed(output)
