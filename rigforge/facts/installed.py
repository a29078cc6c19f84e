"""What the owner already installed, read before rigforge changes anything: where the NVIDIA driver came
from and the CUDA toolkits under /usr/local.

Every command exits 0 on a bare host (no driver, no nvidia-smi, no /usr/local/cuda) and the parsers
turn that into an empty value; the judgement (keep, install, replace, blocked) is rigforge/checks/takeover.py.
GPU processes, the engine port and apt's lock: who holds them is rigforge/facts/holders.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyinfra.api import FactBase

from rigforge.facts.driver_files import NO_DRIVER_FILES, DriverFiles, driver_files_command, parse_driver_files
from rigforge.reads.parsing import split_sections

#: Installed packages that make up an NVIDIA driver, by name: NVIDIA's repository (nvidia-open, cuda-drivers,
#: nvidia-kernel-open-dkms, nvidia-driver-pinning-*), Debian's (nvidia-driver, nvidia-kernel-dkms,
#: nvidia-open-kernel-dkms) and Ubuntu's (nvidia-driver-NNN[-open], linux-modules-nvidia-NNN-*)...
DRIVER_PACKAGE_NAMES = (r"^(nvidia-open(-[0-9]+)?|cuda-drivers(-[0-9]+)?|nvidia-driver(-.+)?|nvidia-kernel-.+"
                        r"|nvidia-.+-kernel-dkms|linux-modules-nvidia-.+)$")
#: ...and by the source package they were built from: the libraries (libcuda1, libnvidia-ml1, ...), firmware
#: and X driver of Debian's and Ubuntu's driver carry no driver name, and left behind they are the second set
#: of libraries ("Driver/library version mismatch"). Debian: nvidia-graphics-drivers[-tesla-NNN],
#: nvidia-open-gpu-kernel-modules; Ubuntu: nvidia-graphics-drivers-NNN[-server], linux-restricted-modules*.
DRIVER_SOURCE_PACKAGES = (r"^(nvidia-graphics-drivers(-.+)?|nvidia-open-gpu-kernel-modules(-.+)?"
                          r"|linux-restricted-modules(-.+)?)$")
RUNFILE_UNINSTALLER = "/usr/bin/nvidia-uninstall"
RUNFILE_LOG = "/var/log/nvidia-installer.log"
DPKG_STATUS = "/var/lib/dpkg/status"
#: Written by rigforge before it removes a driver the owner installed: ``VERSION<TAB>where it came from``. That
#: driver's module stays loaded until the next boot, with nothing on disk to explain it any more.
REPLACED_RECORD = "/var/lib/rigforge/driver-replaced"

_VERSION_LINE = re.compile(r"^\s*(\*\*\*)?\s*(\S+)\s+(-?\d+)\s*$")
_ORIGIN_LINE = re.compile(r"^\s*(-?\d+)\s+(\S+)(.*)$")
_INSTALLER_VERSION = re.compile(r"installer version:\s*(\S+)", re.IGNORECASE)


@dataclass(frozen=True)
class PackageOrigin:
    """An installed package and the apt sources that offer its installed version.

    + version: the installed version, as dpkg prints it
    + origins: source URLs (with suite/component when not a flat repository), e.g.
      ``http://deb.debian.org/debian bookworm/non-free``; ``/var/lib/dpkg/status`` alone means no
      configured source offers that version any more
    """

    version: str
    origins: tuple[str, ...]


def parse_apt_policy(text: str) -> dict[str, PackageOrigin]:
    """Parse ``LC_ALL=C apt-cache policy PKG...`` into {package: PackageOrigin} for installed packages.

    The installed version is the one marked ``***`` in the version table; the lines under it name the
    sources that offer it.
    """
    packages: dict[str, PackageOrigin] = {}
    name, installed, origins, in_installed = "", "", [], False

    def keep() -> None:
        if name and installed and installed != "(none)":
            packages[name] = PackageOrigin(installed, tuple(origins))

    for line in text.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith(":"):
            keep()
            name, installed, origins, in_installed = line.rstrip()[:-1].split(":", 1)[0], "", [], False
        elif line.strip().startswith("Installed:"):
            installed = line.split(":", 1)[1].strip()
        elif (origin := _ORIGIN_LINE.match(line)) and origin.group(2).startswith(("/", "http", "file:", "cdrom:")):
            if in_installed:
                suite = " ".join(origin.group(3).split()[:1])
                where = origin.group(2) if suite in ("", "Packages") else f"{origin.group(2)} {suite}"
                origins.append(where)
        elif version := _VERSION_LINE.match(line):
            in_installed = bool(version.group(1))
    keep()
    return packages


@dataclass(frozen=True)
class KernelModuleFile:
    """The nvidia module the running kernel would load (``modinfo nvidia``).

    + filename: its path under /lib/modules
    + license: ``Dual MIT/GPL`` for NVIDIA's open kernel modules, ``NVIDIA`` for the proprietary ones
    + version: the driver version built into it
    + owner: the package dpkg says installed that file; "" when none did (DKMS builds, the .run installer)
    """

    filename: str
    license: str
    version: str
    owner: str

    @property
    def flavor(self) -> str:
        return "proprietary" if self.license.strip().upper() == "NVIDIA" else "open"


@dataclass(frozen=True)
class RunfileInstall:
    """What NVIDIA's .run installer leaves: its uninstaller and its log (``installer version: X``)."""

    uninstaller: bool
    log: bool
    version: str | None


@dataclass(frozen=True)
class DriverInstall:
    """Where the NVIDIA driver on disk came from.

    + packages: installed driver packages and the sources offering their installed versions
    + module: the module file the running kernel would load, None when there is none
    + runfile: traces of the .run installer, None when there are none
    + replaced: the version of the driver rigforge last replaced (``REPLACED_RECORD``), None when none
    + files: the module files, DKMS sources and user-space libraries, with the packages owning them
    """

    packages: dict[str, PackageOrigin]
    module: KernelModuleFile | None
    runfile: RunfileInstall | None
    replaced: str | None = None
    files: DriverFiles = NO_DRIVER_FILES


NO_DRIVER_INSTALL = DriverInstall(packages={}, module=None, runfile=None)


def _fields(text: str) -> dict[str, str]:
    return {key.strip(): value.strip() for key, sep, value in (line.partition(":") for line in text.splitlines())
            if sep}


def parse_driver_install(text: str) -> DriverInstall:
    """Parse the ``NvidiaDriverInstall`` command's output (sections policy, module, runfile, replaced)."""
    sections = split_sections(text)
    module_fields = _fields(sections.get("module", ""))
    module = None
    if module_fields.get("filename"):
        module = KernelModuleFile(filename=module_fields["filename"], license=module_fields.get("license", ""),
                                  version=module_fields.get("version", ""), owner=module_fields.get("owner", ""))
    runfile_lines = [line.strip() for line in sections.get("runfile", "").splitlines() if line.strip()]
    runfile = None
    if RUNFILE_UNINSTALLER in runfile_lines or RUNFILE_LOG in runfile_lines:
        version = next((match.group(1) for line in runfile_lines if (match := _INSTALLER_VERSION.search(line))), None)
        runfile = RunfileInstall(uninstaller=RUNFILE_UNINSTALLER in runfile_lines, log=RUNFILE_LOG in runfile_lines,
                                 version=version)
    replaced = sections.get("replaced", "").strip().split("\t", 1)[0] or None
    return DriverInstall(packages=parse_apt_policy(sections.get("policy", "")), module=module, runfile=runfile,
                         replaced=replaced, files=parse_driver_files(sections.get("files", "")))


class NvidiaDriverInstall(FactBase[DriverInstall]):
    """
    Returns where the NVIDIA driver on disk came from, as `DriverInstall`: the installed driver packages
    with the apt sources of their installed versions, the module file ``modinfo`` finds and the package
    owning it, and the .run installer's uninstaller and log. A host without any: ``NO_DRIVER_INSTALL``.

    .. code:: python

        install = host.get_fact(NvidiaDriverInstall)
        if install.runfile and install.runfile.uninstaller:
            ...
    """

    def command(self) -> str:
        return (
            "pkgs=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${source:Package}\\n' 2>/dev/null"
            f" | awk '$1 ~ /^.i/ && ($2 ~ /{DRIVER_PACKAGE_NAMES}/ || $3 ~ /{DRIVER_SOURCE_PACKAGES}/) {{print $2}}'); "
            # The driver's files and their owners first: the owners' apt sources are read with the others.
            f"files=$({driver_files_command()}); "
            "pkgs=\"$pkgs $(printf '%s\\n' \"$files\" | awk -F'\\t' '$1 == \"file\" || $1 == \"source\" {print $3}'"
            " | tr ',' ' ')\"; echo '## files'; printf '%s\\n' \"$files\"; "
            "echo '## policy'; if [ -n \"$(echo $pkgs)\" ]; then LC_ALL=C apt-cache policy $(printf '%s\\n' $pkgs"
            " | sort -u) 2>/dev/null; fi; "
            "echo '## module'; f=$(modinfo -F filename nvidia 2>/dev/null); "
            "if [ -n \"$f\" ]; then echo \"filename: $f\"; echo \"license: $(modinfo -F license nvidia)\"; "
            "echo \"version: $(modinfo -F version nvidia)\"; "
            "echo \"owner: $(dpkg -S \"$f\" 2>/dev/null | cut -d: -f1)\"; fi; "
            f"echo '## runfile'; for p in {RUNFILE_UNINSTALLER} {RUNFILE_LOG}; do "
            "if [ -e $p ]; then echo $p; fi; done; "
            f"grep -m1 -i 'installer version' {RUNFILE_LOG} 2>/dev/null; "
            f"echo '## replaced'; head -n1 {REPLACED_RECORD} 2>/dev/null; true"
        )

    @staticmethod
    def default() -> DriverInstall:
        return NO_DRIVER_INSTALL

    def process(self, output: list[str]) -> DriverInstall:
        return parse_driver_install("\n".join(output))


@dataclass(frozen=True)
class CudaTree:
    """One ``/usr/local/cuda-X.Y`` tree.

    + path: e.g. ``/usr/local/cuda-13.2``
    + packages: the packages dpkg says own the folder (empty: not installed by apt)
    + runfile: NVIDIA's runfile uninstaller is inside (``bin/cuda-uninstaller``)
    """

    path: str
    packages: tuple[str, ...]
    runfile: bool

    @property
    def version(self) -> str:
        return self.path.rsplit("cuda-", 1)[-1]


@dataclass(frozen=True)
class CudaInstall:
    """The CUDA toolkits under /usr/local and where ``/usr/local/cuda`` points (resolved; None: absent)."""

    trees: tuple[CudaTree, ...]
    link: str | None


NO_CUDA = CudaInstall(trees=(), link=None)


def parse_cuda_trees(text: str) -> CudaInstall:
    """Parse the ``CudaToolkits`` command's output: ``tree\\tPATH\\tOWNERS\\tRUNFILE`` lines, then ``link\\tTARGET``."""
    trees, link = [], None
    for line in text.splitlines():
        fields = line.split("\t")
        if fields[0] == "tree" and len(fields) >= 2 and fields[1]:
            listed = fields[2] if len(fields) > 2 else ""
            owners = tuple(owner.strip() for owner in listed.split(",") if owner.strip())
            trees.append(CudaTree(path=fields[1], packages=owners, runfile=len(fields) > 3 and fields[3] == "runfile"))
        elif fields[0] == "link" and len(fields) > 1 and fields[1].strip():
            link = fields[1].strip()
    return CudaInstall(trees=tuple(sorted(trees, key=lambda tree: tree.path)), link=link)


class CudaToolkits(FactBase[CudaInstall]):
    """
    Returns the ``/usr/local/cuda-*`` trees, which packages own each one (none: a runfile install or a copy),
    and where ``/usr/local/cuda`` resolves to, as `CudaInstall`.

    .. code:: python

        cuda = host.get_fact(CudaToolkits)
        runfile_trees = [tree.path for tree in cuda.trees if not tree.packages]
    """

    def command(self) -> str:
        return (
            "for d in /usr/local/cuda-*; do if [ -d \"$d\" ] && [ ! -L \"$d\" ]; then "
            "o=$(dpkg -S \"$d\" 2>/dev/null | head -n1 | cut -d: -f1); "
            "r=$(if [ -e \"$d/bin/cuda-uninstaller\" ]; then echo runfile; fi); "
            "printf 'tree\\t%s\\t%s\\t%s\\n' \"$d\" \"$o\" \"$r\"; fi; done; "
            "if [ -e /usr/local/cuda ]; then printf 'link\\t%s\\n' \"$(readlink -f /usr/local/cuda)\"; fi; true"
        )

    @staticmethod
    def default() -> CudaInstall:
        return NO_CUDA

    def process(self, output: list[str]) -> CudaInstall:
        return parse_cuda_trees("\n".join(output))
