"""What apt itself would remove: ``apt-get -s purge`` (a simulation: nothing changes, no lock is taken).

rigforge never guesses which packages a purge takes along (reverse dependencies an owner installed, like a
distribution CUDA toolkit built against the driver's libcuda1): the dry run and the refusal show apt's own
answer.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from pyinfra.api import FactBase

_ACTION = re.compile(r"^(Purg|Remv)\s+(\S+)(?:\s+\[([^\]]*)\])?")


@dataclass(frozen=True)
class AptRemovals:
    """apt's simulated removals.

    + removed: (package, installed version) in apt's order, each once
    + errors: apt's ``E:`` lines (a broken dependency state): the simulation did not answer
    """

    removed: tuple[tuple[str, str], ...]
    errors: tuple[str, ...]

    @property
    def names(self) -> list[str]:
        return [name for name, _version in self.removed]


NOTHING_REMOVED = AptRemovals(removed=(), errors=())


def parse_apt_simulation(text: str) -> AptRemovals:
    """Parse ``LC_ALL=C apt-get -s purge ...`` output: its ``Purg``/``Remv`` lines and ``E:`` lines.

    >>> parse_apt_simulation("Purg nvidia-driver [535.261.03-1]\\nRemv nvtop [3.0.1-1]\\n").names
    ['nvidia-driver', 'nvtop']
    """
    removed: dict[str, str] = {}
    errors = []
    for line in text.splitlines():
        if match := _ACTION.match(line):
            removed.setdefault(match.group(2), match.group(3) or "")
        elif line.startswith("E: "):
            errors.append(line[3:].strip())
    return AptRemovals(removed=tuple(removed.items()), errors=tuple(errors))


class AptPurgeSimulation(FactBase[AptRemovals]):
    """
    Returns what ``apt-get purge PACKAGES`` would remove, from apt's own simulation, as `AptRemovals`
    (``Debug::NoLocking``: it answers while another process holds apt's lock, and changes nothing).

    .. code:: python

        removals = host.get_fact(AptPurgeSimulation, packages=("nvidia-driver", "nvidia-kernel-dkms"))
        if removals.errors: ...
    """

    def command(self, packages: Sequence[str]) -> str:
        names = " ".join(shlex.quote(name) for name in packages)
        return f"LC_ALL=C apt-get -s -o Debug::NoLocking=1 purge {names} 2>&1; true"

    @staticmethod
    def default() -> AptRemovals:
        return NOTHING_REMOVED

    def process(self, output: list[str]) -> AptRemovals:
        return parse_apt_simulation("\n".join(output))
