"""rigforge's apt transactions, recorded on the rig while they run (rigforge/facts/apt_transaction.py).

``recorded(arguments, command)`` is what every apt transaction of rigforge's yields: the record (what
``apt-get -s ARGUMENTS`` says apt will install or remove, each package with its version), the transaction
itself, and the record's removal. The record is on disk before dpkg touches a package: written to a
temporary file, flushed (``sync FILE``), renamed over the old one and the folder flushed, so a power cut at
any moment leaves either no record or a whole one. A transaction that fails keeps its record, as one cut
short does: dpkg may have left its packages half-done either way.

Checked on a sandbox host (apt 2.6.1): ``apt-get -s -o Debug::NoLocking=1`` takes no lock and changes
nothing; with ``-qq`` it prints only ``Inst``/``Conf``/``Remv``/``Purg`` lines, e.g.
``Inst python3-distutils (3.11.2-3 Debian:12.15/oldstable [all])``, and for an upgrade or a reinstall
``Inst NAME [OLD] (NEW ...)`` (tests/fixtures/host/power-cut/).
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Sequence

from pyinfra.api import QuoteString, StringCommand

from rigforge.facts.apt_transaction import TRANSACTION_RECORD

RECORD_HEADER = "# rigforge: apt transaction under way (removed when it ends)"
#: ``apt-get -s`` lines -> record lines: ``install NAME VERSION``, ``remove``/``purge NAME VERSION``.
SIMULATION_TO_RECORD = (
    '$1=="Inst" { v = ($3 ~ /^\\[/) ? $4 : $3; sub(/^\\(/, "", v); print "install", $2, v } '
    '$1=="Remv" || $1=="Purg" { v = $3; gsub(/[][]/, "", v); '
    'print ($1=="Purg" ? "purge" : "remove"), $2, (v == "" ? "-" : v) }'
)


def record_script(arguments: Sequence[str], record: str = TRANSACTION_RECORD) -> str:
    """The shell script that records the transaction ``apt-get ARGUMENTS`` before it runs (pure).

    + arguments: apt-get's arguments, exactly as the transaction gets them (``install -y ... curl``)
    + record: where the record goes

    When apt cannot simulate (it would fail the same way in a moment), the record names no package.
    """
    q = shlex.quote
    folder = posixpath.dirname(record)
    simulate = " ".join(q(argument) for argument in ("apt-get", "-s", "-o", "Debug::NoLocking=1", *arguments))
    return "; ".join([
        "set -e",
        f"install -d -m 755 {q(folder)}",
        f"simulated=$(LC_ALL=C {simulate} 2>/dev/null) || simulated=",
        f"{{ echo \"{RECORD_HEADER}; started $(date -u +%Y-%m-%dT%H:%M:%SZ)\"; "
        f"printf '%s\\n' \"$simulated\" | awk {q(SIMULATION_TO_RECORD)}; }} > {q(record)}.new",
        # On disk before dpkg starts: a power cut must find either the old state or the whole record.
        f"sync {q(record)}.new",
        f"mv -f {q(record)}.new {q(record)}",
        f"sync {q(folder)}",
    ])


def record_command(arguments: Sequence[str]) -> StringCommand:
    """The command that records ``apt-get ARGUMENTS`` on the rig (``record_script``)."""
    return StringCommand("sh", "-c", QuoteString(record_script(arguments)))


def forget_command() -> StringCommand:
    """The command that removes the record once the transaction ended well."""
    return StringCommand("rm", "-f", TRANSACTION_RECORD)


def recorded(arguments: Sequence[str], command: StringCommand) -> list[StringCommand]:
    """The commands of one apt transaction of rigforge's: record it, run it, remove the record.

    + arguments: apt-get's arguments (``command`` runs ``apt-get`` with them, perhaps wrapped)
    + command: the transaction itself

    **Example:**

    .. code:: python

        arguments = install_arguments("curl")
        yield from recorded(arguments, apt_get(*arguments, minutes=10))
    """
    return [record_command(arguments), command, forget_command()]
