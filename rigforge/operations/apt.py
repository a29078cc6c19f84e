"""apt operations that stay silent on a converged host (no ``apt-get update`` unless installing)."""

from __future__ import annotations

from collections.abc import Sequence

from pyinfra import host, state
from pyinfra.api import StringCommand, operation
from pyinfra.api.operation import OperationMeta
from pyinfra.facts.deb import DebPackages

_APT_ENV = "DEBIAN_FRONTEND=noninteractive"


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
    if refresh and not lists_refreshed(refreshed_by):
        yield StringCommand(_APT_ENV, "apt-get", "update", "-qq")
    extra = ["--allow-downgrades", "--allow-change-held-packages"] if allow_downgrades else []
    yield StringCommand(
        _APT_ENV, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *extra, *missing
    )


def lists_refreshed(refreshed_by: Sequence[OperationMeta]) -> bool:
    """True while executing when one of ``refreshed_by`` (an ``apt-get update``) ran this run."""
    return state.is_executing and any(op.is_complete() and op.did_change() for op in refreshed_by)
