"""What is installed on a host, as the host layer needs it: dpkg packages with their hold state, the
boot tools and container type, the keys in an apt keyring, and the driver versions nvidia-smi reports.

pyinfra's own ``DebPackages`` fact gives names and versions but not the hold flag, which the driver
role must read before it upgrades a held driver; ``DpkgPackages`` reads both from one dpkg-query.
Every command exits 0 whether or not its tool or file exists; parsing is a pure function each.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

from pyinfra.api import FactBase

from rigforge.reads.parsing import split_sections

DPKG_FORMAT = r"${Package}\t${Version}\t${db:Status-Abbrev}\n"
TOOLS_SECTION = "tools"


@dataclass(frozen=True)
class InstalledPackage:
    """A package dpkg has installed: its version exactly as dpkg prints it, and whether it is held."""

    version: str
    held: bool


def parse_dpkg_query(text: str) -> dict[str, InstalledPackage]:
    """Parse ``dpkg-query -W -f='${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'`` output.

    Only installed packages are kept (status abbreviation's second letter ``i``); the first letter
    ``h`` is dpkg's "hold" selection, which is what ``apt-mark hold`` sets.
    """
    packages: dict[str, InstalledPackage] = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 3 or len(fields[2]) < 2:
            continue
        name, version, status = fields
        if status[1] == "i":
            packages[name.split(":", 1)[0]] = InstalledPackage(version=version, held=status[0] == "h")
    return packages


def upstream_version(version: str) -> str:
    """The upstream part of a Debian version: ``595.45.04-1`` -> ``595.45.04`` (epoch and revision dropped)."""
    without_epoch = version.split(":", 1)[1] if ":" in version else version
    return without_epoch.rsplit("-", 1)[0] if "-" in without_epoch else without_epoch


def _order(char: str) -> int:
    # dpkg's ordering of non-digit characters: ~ sorts before everything, letters before symbols.
    if char == "~":
        return -1
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_part(left: str, right: str) -> int:
    while left or right:
        left_text = re.match(r"[^0-9]*", left).group(0)  # type: ignore[union-attr]
        right_text = re.match(r"[^0-9]*", right).group(0)  # type: ignore[union-attr]
        for index in range(max(len(left_text), len(right_text))):
            a = _order(left_text[index]) if index < len(left_text) else 0
            b = _order(right_text[index]) if index < len(right_text) else 0
            if a != b:
                return -1 if a < b else 1
        left, right = left[len(left_text):], right[len(right_text):]
        left_digits = re.match(r"[0-9]*", left).group(0)  # type: ignore[union-attr]
        right_digits = re.match(r"[0-9]*", right).group(0)  # type: ignore[union-attr]
        a, b = int(left_digits or 0), int(right_digits or 0)
        if a != b:
            return -1 if a < b else 1
        left, right = left[len(left_digits):], right[len(right_digits):]
    return 0


def _split_version(version: str) -> tuple[int, str, str]:
    epoch, sep, rest = version.partition(":")
    if not sep:
        epoch, rest = "0", version
    upstream, dash, revision = rest.rpartition("-")
    if not dash:
        upstream, revision = rest, ""
    return int(epoch or 0), upstream, revision


def compare_debian_versions(left: str, right: str) -> int:
    """Compare two Debian versions as ``dpkg --compare-versions`` does: -1, 0 or 1.

    >>> compare_debian_versions("590.48.01-1", "595.45.04-1")
    -1
    """
    left_epoch, left_upstream, left_revision = _split_version(left)
    right_epoch, right_upstream, right_revision = _split_version(right)
    if left_epoch != right_epoch:
        return -1 if left_epoch < right_epoch else 1
    return _compare_part(left_upstream, right_upstream) or _compare_part(left_revision, right_revision)


class DpkgPackages(FactBase[dict[str, InstalledPackage]]):
    """
    Returns the installed dpkg packages as {name: InstalledPackage(version, held)}.

    .. code:: python

        installed = host.get_fact(DpkgPackages)
        held = [name for name, package in installed.items() if package.held]
    """

    def command(self) -> str:
        return f"dpkg-query -W -f='{DPKG_FORMAT}' 2>/dev/null || true"

    @staticmethod
    def default() -> dict[str, InstalledPackage]:
        return {}

    def process(self, output: list[str]) -> dict[str, InstalledPackage]:
        return parse_dpkg_query("\n".join(output))


@dataclass(frozen=True)
class BootTools:
    """How the host boots, as far as the boot role must know.

    + container: the container type (``docker``, ``lxc``…) or None on a machine or VM with its own
      kernel. In a container /proc/cmdline and /proc/sys belong to the machine's kernel and there is
      no bootloader of the host's own.
    + update_grub / update_initramfs: whether those tools are installed
    """

    container: str | None
    update_grub: bool
    update_initramfs: bool


def parse_boot_tools(text: str) -> BootTools:
    """Parse the ``BootEnvironment`` command's output: systemd-detect-virt, then the tools found."""
    sections = split_sections(text)
    virt = sections[""].strip().splitlines()
    container = virt[0].strip() if virt and virt[0].strip() not in ("", "none") else None
    tools = {line.strip().rsplit("/", 1)[-1] for line in sections.get(TOOLS_SECTION, "").splitlines()}
    return BootTools(container=container, update_grub="update-grub" in tools,
                     update_initramfs="update-initramfs" in tools)


class BootEnvironment(FactBase[BootTools]):
    """
    Returns the host's container type (None on real hardware) and its boot tools as `BootTools`.

    .. code:: python

        boot = host.get_fact(BootEnvironment)
        if boot.container is None and boot.update_grub:
            ...
    """

    def command(self) -> str:
        # /.dockerenv covers hosts without systemd-detect-virt.
        return (
            "systemd-detect-virt --container 2>/dev/null || { test -e /.dockerenv && echo docker; }; "
            f"echo '## {TOOLS_SECTION}'; command -v update-grub; command -v update-initramfs; true"
        )

    def process(self, output: list[str]) -> BootTools:
        return parse_boot_tools("\n".join(output))


def _packets(data: bytes) -> list[tuple[int, bytes]]:
    """Split binary OpenPGP data into (tag, body) packets (RFC 4880 §4.2, old and new headers)."""
    packets: list[tuple[int, bytes]] = []
    pos = 0
    while pos < len(data):
        header = data[pos]
        if not header & 0x80:
            raise ValueError(f"not an OpenPGP packet at byte {pos}")
        if header & 0x40:  # new format
            tag = header & 0x3F
            first = data[pos + 1]
            if first < 192:
                length, pos = first, pos + 2
            elif first < 224:
                length, pos = ((first - 192) << 8) + data[pos + 2] + 192, pos + 3
            elif first == 255:
                length, pos = int.from_bytes(data[pos + 2:pos + 6], "big"), pos + 6
            else:
                raise ValueError("partial-length packets do not occur in keyrings")
        else:  # old format
            tag, length_type = (header >> 2) & 0x0F, header & 0x03
            size = {0: 1, 1: 2, 2: 4}.get(length_type)
            if size is None:
                raise ValueError("indeterminate-length packets do not occur in keyrings")
            length, pos = int.from_bytes(data[pos + 1:pos + 1 + size], "big"), pos + 1 + size
        packets.append((tag, data[pos:pos + length]))
        pos += length
    return packets


def keyring_fingerprints(data: bytes) -> tuple[str, ...]:
    """The v4 fingerprints of the primary keys in a binary keyring (what ``signed-by`` files hold).

    A v4 fingerprint is SHA-1 over 0x99, the two-byte body length and the public-key packet body.
    """
    fingerprints = []
    for tag, body in _packets(data):
        if tag == 6 and body[:1] == b"\x04":
            digest = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body, usedforsecurity=False)
            fingerprints.append(digest.hexdigest().upper())
    return tuple(fingerprints)


def parse_keyring_base64(text: str) -> tuple[str, ...] | None:
    """Parse the ``KeyringFingerprints`` output (the keyring in base64); None when absent or unreadable."""
    encoded = "".join(text.split())
    if not encoded:
        return None
    try:
        return keyring_fingerprints(base64.b64decode(encoded, validate=True))
    except (ValueError, IndexError, binascii.Error):
        return None


class KeyringFingerprints(FactBase[tuple[str, ...] | None]):
    """
    Returns the primary-key fingerprints in a binary apt keyring, or None when the file is missing
    or is not a binary keyring. Parsed on the controller, so gpg on the host writes nothing.

    .. code:: python

        fingerprints = host.get_fact(KeyringFingerprints, path="/etc/apt/keyrings/nvidia-cuda.gpg")
    """

    def command(self, path: str) -> str:
        return f"base64 -w0 {path} 2>/dev/null; true"

    def process(self, output: list[str]) -> tuple[str, ...] | None:
        return parse_keyring_base64("\n".join(output))


@dataclass(frozen=True)
class SmiVersions:
    """What ``nvidia-smi --version`` reports.

    + smi_version: the installed nvidia-smi (user-space driver) version
    + driver_version: the loaded kernel driver's version, as NVML reads it; None when NVML cannot
      talk to the driver (module not loaded, or user space and kernel module differ)
    + error: nvidia-smi's own message in that case
    """

    smi_version: str | None
    driver_version: str | None
    error: str | None


_SMI_LINE = re.compile(r"^\s*(NVIDIA-SMI|DRIVER) version\s*:\s*(\S+)", re.IGNORECASE)


def parse_smi_version(text: str) -> SmiVersions | None:
    """Parse ``nvidia-smi --version``; None when nvidia-smi is not installed (empty output)."""
    if not text.strip():
        return None
    found: dict[str, str] = {}
    errors = []
    for line in text.splitlines():
        match = _SMI_LINE.match(line)
        if match:
            found[match.group(1).upper()] = match.group(2)
        elif line.strip() and ("fail" in line.lower() or "mismatch" in line.lower()):
            errors.append(line.strip())
    return SmiVersions(smi_version=found.get("NVIDIA-SMI"), driver_version=found.get("DRIVER"),
                       error="; ".join(errors) or None)


class NvidiaSmiVersions(FactBase[SmiVersions | None]):
    """
    Returns ``nvidia-smi --version`` as `SmiVersions`, or None where nvidia-smi is not installed.
    Its DRIVER line is the second source of the loaded driver version, beside
    /proc/driver/nvidia/version (`rigforge.facts.NvidiaLoadedDriver`).

    .. code:: python

        versions = host.get_fact(NvidiaSmiVersions)
        loaded = versions.driver_version if versions else None
    """

    def command(self) -> str:
        return "if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi --version 2>&1; fi; true"

    def process(self, output: list[str]) -> SmiVersions | None:
        return parse_smi_version("\n".join(output))
