"""apt operations that stay silent on a converged host (no ``apt-get update`` unless installing).

An operation with something to do first waits while another process holds apt's lock and, before the
run's first install, finishes what dpkg left unfinished (``rigforge/operations/apt_busy.py``); its install is
recorded on the rig while it runs, so a run cut short is finished by the next (``rigforge/operations/apt_record.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyinfra import host, state
from pyinfra.api import operation
from pyinfra.api.operation import OperationMeta
from pyinfra.facts.deb import DebPackages

from rigforge.operations.apt_busy import apt_get, apt_install, profile_lock_wait
from rigforge.operations.dpkg_repair import before_apt
from rigforge.operations.followup import changed_this_run


def missing_packages(installed: dict[str, set[str]], wanted: list[str]) -> list[str]:
    """Names from ``wanted`` (``name`` or ``name=version``) that dpkg does not have as asked."""
    missing = []
    for spec in wanted:
        name, _, version = spec.partition("=")
        versions = installed.get(name, set())
        if not versions or (version and version not in versions):
            missing.append(spec)
    return missing


@operation()
def packages(packages: list[str], refresh: bool = True, allow_downgrades: bool = False,
             refreshed_by: Sequence[OperationMeta] = ()):
    """
    Install apt packages; refresh the package lists only when something must be installed.

    + packages: names, or ``name=version`` with the version exactly as dpkg prints it
    + refresh: run ``apt-get update`` first when installing (a repository may be new)
    + allow_downgrades: permit moving a pinned package to a lower version
    + refreshed_by: operations that ran ``apt-get update`` earlier in this run; when one of them did,
      the lists are fresh and are not fetched again

    **Example:**

    .. code:: python

        packages(name="Install base tools", packages=["curl", "pciutils"])
    """
    missing = missing_packages(host.get_fact(DebPackages) or {}, packages)
    if not missing:
        host.noop(f"packages installed: {', '.join(packages)}")
        return
    minutes = profile_lock_wait()
    yield from before_apt(minutes)
    if refresh and not lists_refreshed(refreshed_by):
        yield apt_get("update", "-qq", minutes=minutes)
    extra = ["--allow-downgrades", "--allow-change-held-packages"] if allow_downgrades else []
    yield from apt_install(*missing, minutes=minutes, extra=tuple(extra))


@operation()
def lists_updated(triggers: Sequence[OperationMeta]):
    """
    ``apt-get update`` only when one of ``triggers`` (a repository's key or sources file) changed this run.

    + triggers: the operations whose change makes new package lists necessary

    **Example:**

    .. code:: python

        sources = managed_file(dest="/etc/apt/sources.list.d/vendor.sources", content=text)
        lists_updated(name="Refresh the package lists (repository changed)", triggers=[sources])
    """
    if not changed_this_run(triggers):
        host.noop("apt-get update: inputs unchanged")
        return
    minutes = profile_lock_wait()
    yield from before_apt(minutes, installs=False)
    yield apt_get("update", "-qq", minutes=minutes)


def lists_refreshed(refreshed_by: Sequence[OperationMeta]) -> bool:
    """True while executing when one of ``refreshed_by`` (an ``apt-get update``) ran this run."""
    return state.is_executing and any(op.is_complete() and op.did_change() for op in refreshed_by)
