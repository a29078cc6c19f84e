"""Packages dpkg left unfinished: an owner's upgrade that was interrupted, or a run cut off mid-install.

apt refuses to install anything after an interrupted dpkg run ("E: dpkg was interrupted, you must manually
run 'dpkg --configure -a' to correct the problem"), and a package left unpacked is not working software.
``DpkgUnfinished`` reads the states from dpkg's own database through ``dpkg-query`` (which also reads the
journal of a run that was cut off), so the apt operations can finish them with ``dpkg --configure -a``
before their first install, and say so. Only the packages that are not in a final state are sent back
(the host filters), so a healthy host answers with nothing but the section marker.

What ``dpkg --configure -a`` can finish: ``unpacked``, ``half-configured``, ``triggers-awaited`` and
``triggers-pending``. What it cannot: ``half-installed`` and any package marked ``reinstreq`` (its files
are in an unknown state; dpkg --audit says "must be reinstalled"); those need
``apt-get install --reinstall``, which rigforge leaves to the owner.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api import FactBase

from rigforge.reads.parsing import split_sections

DPKG_ADMIN_DIR = "/var/lib/dpkg"
JOURNAL_SECTION = "journal"
#: States ``dpkg --configure -a`` takes to ``installed``.
CONFIGURABLE = ("unpacked", "half-configured", "triggers-awaited", "triggers-pending")
#: Final states: nothing left to do.
FINISHED = ("installed", "config-files", "not-installed")
STATUS_FORMAT = r"${binary:Package} ${db:Status-Status} ${db:Status-Eflag}\n"


@dataclass(frozen=True)
class UnfinishedPackage:
    """A package dpkg did not finish: its name (``name:arch`` for a foreign architecture), state and flag."""

    name: str
    status: str
    reinstall_required: bool

    @property
    def configurable(self) -> bool:
        """True when ``dpkg --configure -a`` finishes it."""
        return self.status in CONFIGURABLE and not self.reinstall_required

    def describe(self) -> str:
        return f"{self.name} ({self.status}{', reinstall required' if self.reinstall_required else ''})"


@dataclass(frozen=True)
class DpkgState:
    """What dpkg left unfinished: packages not in a final state, and whether a run's journal is pending."""

    packages: tuple[UnfinishedPackage, ...] = ()
    journal_pending: bool = False

    @property
    def needs_configure(self) -> bool:
        """True when ``dpkg --configure -a`` has something to do (a configurable package or a journal)."""
        return self.journal_pending or any(package.configurable for package in self.packages)

    @property
    def needs_reinstall(self) -> tuple[UnfinishedPackage, ...]:
        """The packages ``dpkg --configure -a`` cannot finish."""
        return tuple(package for package in self.packages if not package.configurable)

    def __bool__(self) -> bool:
        return bool(self.packages) or self.journal_pending


def parse_dpkg_state(text: str) -> DpkgState:
    """Parse the ``DpkgUnfinished`` command's output: ``name status eflag`` lines, then the journal's files.

    >>> parse_dpkg_state("hello unpacked ok\\n## journal\\n").packages[0].describe()
    'hello (unpacked)'
    """
    sections = split_sections(text)
    packages = []
    for line in sections[""].splitlines():
        fields = line.split()
        if len(fields) != 3:
            continue
        name, status, flag = fields
        if status in FINISHED and flag == "ok":
            continue
        packages.append(UnfinishedPackage(name=name, status=status, reinstall_required=flag == "reinstreq"))
    # Journal entries are numbered files; apt looks for those alone ("tmp.i" is dpkg's scratch file).
    journal = [line for line in sections.get(JOURNAL_SECTION, "").split() if line.isdigit()]
    return DpkgState(packages=tuple(packages), journal_pending=bool(journal))


class DpkgUnfinished(FactBase[DpkgState]):
    """
    Returns what dpkg left unfinished as a ``DpkgState`` (false when nothing).

    .. code:: python

        state = host.get_fact(DpkgUnfinished)
        if state.needs_configure:
            ...  # dpkg --configure -a before installing
    """

    def command(self) -> str:
        # The grep only keeps the answer short; the parser decides on its own.
        return (f"dpkg-query -W -f='{STATUS_FORMAT}' 2>/dev/null"
                " | grep -Ev ' (installed|config-files|not-installed) ok$'; "
                f"echo '## {JOURNAL_SECTION}'; ls -A {DPKG_ADMIN_DIR}/updates 2>/dev/null; true")

    @staticmethod
    def default() -> DpkgState:
        return DpkgState()

    def process(self, output: list[str]) -> DpkgState:
        return parse_dpkg_state("\n".join(output))
