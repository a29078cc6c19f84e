"""What rigforge's own apt transaction was doing on the rig when it was cut short (power, network, a kill).

Before each apt transaction of rigforge's (an install, a reinstall, the driver takeover's purge) the rig
gets ``/var/lib/rigforge/apt-transaction``: one line per package apt said it would install or remove
(``apt-get -s`` with the very arguments of the transaction), with the version, written to a temporary file,
flushed to disk and renamed into place before apt starts. The record goes when apt-get exits 0; a
transaction cut short (or failed) leaves it for the next run. There it tells rigforge's packages from the
owner's: a package dpkg left half-installed that the record names is finished by rigforge itself
(rigforge/operations/apt_record.py); any other one stops the rig with the fix, as before.

The record, as written on a sandbox host (tests/fixtures/host/power-cut/)::

    # rigforge: apt transaction under way (removed when it ends); started 2026-11-25T16:20:00Z
    install libnuma1 2.0.16-1
    install python3-distutils 3.11.2-3
    purge nvidia-driver 535.261.03-1
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyinfra.api import FactBase

TRANSACTION_RECORD = "/var/lib/rigforge/apt-transaction"
#: apt-get -s line kinds -> what the record calls them.
ACTIONS = ("install", "remove", "purge")


@dataclass(frozen=True)
class RecordedPackage:
    """One package of a recorded transaction: what apt was doing to it, and at which version."""

    action: str
    version: str


@dataclass(frozen=True)
class AptTransaction:
    """rigforge's apt transaction that did not end: its packages by name (``name``, no ``:arch``)."""

    started: str = ""
    packages: dict[str, RecordedPackage] = field(default_factory=dict)

    def find(self, name: str) -> RecordedPackage | None:
        """The recorded package for a dpkg name (``libnuma1:amd64`` or ``libnuma1``), None when not recorded."""
        return self.packages.get(name.split(":", 1)[0])


def parse_transaction(text: str) -> AptTransaction | None:
    """Parse the record (None when there is none: the file is absent or empty).

    >>> parse_transaction("# x; started 2026-11-25T16:20:00Z\\ninstall curl 7.88.1-10\\n").find("curl")
    RecordedPackage(action='install', version='7.88.1-10')
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    started, packages = "", {}
    for line in lines:
        if line.startswith("#"):
            started = line.rpartition("started ")[2] if "started " in line else started
            continue
        fields = line.split()
        if len(fields) == 3 and fields[0] in ACTIONS:
            packages[fields[1].split(":", 1)[0]] = RecordedPackage(action=fields[0], version=fields[2])
    return AptTransaction(started=started, packages=packages)


class AptTransactionRecord(FactBase[AptTransaction | None]):
    """
    Returns the apt transaction of rigforge's that did not end (``AptTransaction``), or None.

    Read only when dpkg shows a package it cannot finish (rigforge/operations/apt_busy.py).

    .. code:: python

        record = host.get_fact(AptTransactionRecord)
        if record and record.find("python3-distutils"):
            ...  # rigforge's own: reinstall it
    """

    def command(self) -> str:
        return f"cat {TRANSACTION_RECORD} 2>/dev/null; true"

    @staticmethod
    def default() -> None:
        return None

    def process(self, output: list[str]) -> AptTransaction | None:
        return parse_transaction("\n".join(output))
