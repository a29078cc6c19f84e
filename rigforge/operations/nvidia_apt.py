"""NVIDIA's CUDA apt repository and the pinned, held driver packages from it.

Decisions (provisioning.md §B, rig-facts §1.3):

- **One repository per distro and CPU family.** NVIDIA publishes a flat repository per
  ``<distro>/<arch>``: ``ubuntu2204``, ``ubuntu2404``, ``debian12``, ``debian13``; ``x86_64``, and
  ``sbsa`` for 64-bit Arm servers. The profile's ``driver.repo.url``/``key_url`` carry ``{distro}`` and
  ``{arch}``; ``cuda_repo_platform`` fills them from the host's os-release and ``uname -m``.
- **Key in /etc/apt/keyrings, referenced by signed-by.** The key is fetched on the host, de-armored
  into a binary keyring and, when the profile pins a fingerprint, checked before it is moved into
  place. No ``apt-key``, no ``curl | sh``, no keyring package. The repository is a deb822
  ``.sources`` file (flat repository: ``Suites: /``). ``apt-get update`` runs only when the key or
  the sources file changed, or when a package must be installed.
- **Driver 590+ naming and pinning.** From branch 590 NVIDIA's Debian/Ubuntu packages lose the branch
  suffix and follow the newest driver by default; the open kernel-module flavor is ``nvidia-open``
  (proprietary: ``cuda-drivers``). The exact version is locked by an apt preferences file written
  here (``Pin: version <ver>-*``, priority 1000 - the same pin NVIDIA's ``nvidia-driver-pinning-<ver>``
  package ships), so the pin follows the profile without depending on a pinning package being
  published for that version. A priority of 1000 also makes apt *downgrade* to the pinned version.
- **Hold as check-then-act.** ``apt-mark hold`` runs only for packages dpkg does not show as held;
  an upgrade first un-holds the old driver's packages, installs the new version (``--allow-downgrades``
  only when the pinned version is lower than the installed one), and the hold operation re-holds
  every package that carries the new driver version.
- **apt busy.** Each of these waits first while another process holds apt's lock, and the install
  finishes what dpkg left unfinished (``rigforge/operations/apt_busy.py``); the install is recorded on the rig
  while it runs (``rigforge/operations/apt_record.py``): a DKMS build or an unpack cut short by a power cut is
  finished by the next run.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from pyinfra import host
from pyinfra.api import OperationError, StringCommand, operation
from pyinfra.api.command import QuoteString
from pyinfra.api.operation import OperationMeta

from rigforge.facts.packages import (
    DpkgPackages,
    InstalledPackage,
    KeyringFingerprints,
    compare_debian_versions,
    upstream_version,
)
from rigforge.operations.apt import lists_refreshed
from rigforge.operations.apt_busy import apt_get, apt_mark, install_arguments, profile_lock_wait
from rigforge.operations.apt_record import recorded
from rigforge.operations.dpkg_repair import before_apt

#: Debian/Ubuntu releases NVIDIA publishes a CUDA repository for: (os-release ID, VERSION_ID) -> name.
CUDA_REPO_DISTROS: dict[tuple[str, str], str] = {
    ("ubuntu", "22.04"): "ubuntu2204",
    ("ubuntu", "24.04"): "ubuntu2404",
    ("debian", "12"): "debian12",
    ("debian", "13"): "debian13",
}
#: ``uname -m`` -> the repository's architecture directory (Arm servers are "sbsa").
CUDA_REPO_ARCHES: dict[str, str] = {"x86_64": "x86_64", "aarch64": "sbsa"}

#: The top-level driver package per flavor in NVIDIA's 590+ repositories.
DRIVER_PACKAGES: dict[str, tuple[str, ...]] = {"open": ("nvidia-open",), "proprietary": ("cuda-drivers",)}


@dataclass(frozen=True)
class RepoPlatform:
    """The ``{distro}`` and ``{arch}`` of NVIDIA's repository paths, e.g. ``debian12`` / ``x86_64``."""

    distro: str
    arch: str

    def fill(self, template: str) -> str:
        """Fill ``{distro}`` and ``{arch}`` in a profile URL template."""
        return template.replace("{distro}", self.distro).replace("{arch}", self.arch)


def cuda_repo_platform(os_id: str, version_id: str, machine: str) -> RepoPlatform:
    """Map os-release ID/VERSION_ID and ``uname -m`` to NVIDIA's repository names.

    >>> cuda_repo_platform("debian", "12", "x86_64")
    RepoPlatform(distro='debian12', arch='x86_64')
    """
    distro = CUDA_REPO_DISTROS.get((os_id.lower(), version_id))
    if distro is None:
        supported = ", ".join(f"{i} {v}" for i, v in CUDA_REPO_DISTROS)
        raise OperationError(f"NVIDIA's CUDA apt repository has no build for {os_id} {version_id}; "
                             f"supported: {supported}")
    arch = CUDA_REPO_ARCHES.get(machine)
    if arch is None:
        raise OperationError(f"NVIDIA's CUDA apt repository has no build for CPU {machine!r}; "
                             f"supported: {', '.join(CUDA_REPO_ARCHES)}")
    return RepoPlatform(distro, arch)


def driver_packages(flavor: str) -> tuple[str, ...]:
    """The package(s) that pull in the whole driver of ``flavor`` (``open`` or ``proprietary``)."""
    return DRIVER_PACKAGES[flavor]


def installed_driver_version(installed: dict[str, InstalledPackage], packages: Sequence[str]) -> str | None:
    """The driver version dpkg has installed (upstream part of the first top-level package), or None."""
    for name in packages:
        if name in installed:
            return upstream_version(installed[name].version)
    return None


def packages_at_version(installed: dict[str, InstalledPackage], version: str) -> list[str]:
    """Installed packages whose upstream version is ``version``: the parts of that driver release."""
    return sorted(name for name, package in installed.items() if upstream_version(package.version) == version)


@operation()
def signing_key(key_url: str, keyring: str, fingerprint: str | None = None):
    """
    Fetch a repository's signing key on the host into a binary keyring for ``signed-by``.

    + key_url: where the (ASCII-armored or binary) public key is published
    + keyring: destination, e.g. ``/etc/apt/keyrings/rigforge-nvidia-cuda.gpg``
    + fingerprint: 40 hex digits; the key must carry it or nothing is installed

    Nothing is fetched when the keyring exists and (if pinned) holds the fingerprint. Without a
    pinned fingerprint an existing keyring is kept as it is: pin one to have a rotated key replaced.

    **Example:**

    .. code:: python

        signing_key(name="NVIDIA key", key_url="https://.../3bf863cc.pub",
                    keyring="/etc/apt/keyrings/rigforge-nvidia-cuda.gpg",
                    fingerprint="EB693B3035CD5710E231E123A4B469963BF863CC")
    """
    present = host.get_fact(KeyringFingerprints, path=keyring)
    if present is not None and (fingerprint is None or fingerprint in present):
        host.noop(f"{keyring} holds the key" + (f" {fingerprint}" if fingerprint else ""))
        return
    yield StringCommand("sh", "-c", QuoteString(key_install_script(key_url, keyring, fingerprint)))


def key_install_script(key_url: str, keyring: str, fingerprint: str | None) -> str:
    """The shell script that fetches, de-armors, checks and installs a key (pure; unit-tested)."""
    q = shlex.quote
    temp = f"{keyring}.rigforge-new"
    steps = [
        "set -e",
        f"install -d -m 755 {q(posixpath.dirname(keyring))}",
        # A temporary GNUPGHOME, removed on exit: gpg leaves nothing behind on the host.
        "tmp=$(mktemp -d)",
        "trap 'rm -rf \"$tmp\"' EXIT",
        f"curl -fsSL --retry 3 {q(key_url)} -o \"$tmp/key\"",
        "if grep -q 'BEGIN PGP PUBLIC KEY BLOCK' \"$tmp/key\"; then"
        " gpg --batch --homedir \"$tmp\" --dearmor < \"$tmp/key\" > \"$tmp/keyring\";"
        " else cp \"$tmp/key\" \"$tmp/keyring\"; fi",
    ]
    if fingerprint:
        # The fingerprint line that follows a "pub" line is the primary key's.
        primary = ("gpg --batch --homedir \"$tmp\" --show-keys --with-colons \"$tmp/keyring\""
                   " | awk -F: '$1==\"pub\"{p=1;next} $1==\"fpr\"&&p{print $10;p=0}'")
        message = f"{key_url}: the key does not have the pinned fingerprint {fingerprint}"
        steps.append(f"if ! {primary} | grep -qx {q(fingerprint)}; then echo {q(message)} >&2; exit 1; fi")
    steps += [f"install -m 644 \"$tmp/keyring\" {q(temp)}", f"mv -f {q(temp)} {q(keyring)}"]
    return "; ".join(steps)


@operation()
def install_driver(packages: Sequence[str], version: str, refreshed_by: Sequence[OperationMeta] = (),
                   if_it_fails: str = ""):
    """
    Install the driver's top-level packages at ``version`` (the apt pin selects it), upgrading or
    downgrading a held driver: un-hold the old release's packages, update the lists, install.

    + packages: top-level driver packages (``nvidia-open``)
    + version: upstream driver version (``595.45.04``); the apt preferences pin must select it
    + refreshed_by: ``apt-get update`` operations that may have run already this run
    + if_it_fails: printed when the install fails (the state a driver replacement left the rig in)

    Re-holding is the ``hold_at_version`` operation's job, run after this one.

    **Example:**

    .. code:: python

        install_driver(name="Install the driver", packages=["nvidia-open"], version="595.45.04")
    """
    installed = host.get_fact(DpkgPackages)
    current = {name: upstream_version(installed[name].version) for name in packages if name in installed}
    missing = [name for name in packages if current.get(name) != version]
    if not missing:
        host.noop(f"driver {version} installed ({', '.join(packages)})")
        return
    old_versions = {current[name] for name in missing if name in current}
    unhold = sorted({name for old in old_versions for name in packages_at_version(installed, old)
                     if installed[name].held})
    change = ", ".join(f"{name} {current.get(name, 'absent')} -> {version}" for name in missing)
    # Said before the first command: a dry run runs the operation only up to its first command.
    host.log(f"driver: {change}")
    minutes = profile_lock_wait()
    yield from before_apt(minutes)
    if unhold:
        yield apt_mark("unhold", *unhold)
    if not lists_refreshed(refreshed_by):
        yield apt_get("update", "-qq", minutes=minutes)
    downgrade = any(compare_debian_versions(old, version) > 0 for old in old_versions)
    extra = ["--allow-downgrades"] if downgrade else []
    arguments = install_arguments(*missing, extra=tuple(extra))
    install = apt_get(*arguments, minutes=minutes)
    yield from recorded(arguments, said_on_failure(install, if_it_fails) if if_it_fails else install)


def said_on_failure(command: StringCommand, message: str) -> StringCommand:
    """``command``, printing ``message`` on stderr and exiting 1 when it fails (its own output comes first)."""
    return StringCommand(command, "||", "{", "echo", QuoteString(message), ">&2;", "exit", "1;", "}")


@operation()
def hold_at_version(packages: Sequence[str], version: str, hold: bool = True):
    """
    Hold (or release) the driver's packages so ``apt upgrade`` and unattended-upgrades leave them.

    + packages: top-level driver packages; held even if their version is not ``version``
    + version: every installed package whose upstream version equals it is a part of this driver
      release and is held too
    + hold: False releases those holds instead

    **Example:**

    .. code:: python

        hold_at_version(name="Hold the driver", packages=["nvidia-open"], version="595.45.04")
    """
    installed = host.get_fact(DpkgPackages)
    parts = sorted(set(packages_at_version(installed, version)) | {p for p in packages if p in installed})
    to_change = [name for name in parts if installed[name].held != hold]
    if not to_change:
        host.noop(f"driver {version} packages {'held' if hold else 'not held'}: {', '.join(parts) or 'none'}")
        return
    minutes = profile_lock_wait()
    yield from before_apt(minutes, installs=False)
    yield apt_mark("hold" if hold else "unhold", *to_change)
