"""The files of the NVIDIA driver on this system and who owns them: the ground truth of where a driver came from.

A package is the driver only when it owns the loaded module's files (``dpkg -S``): a package found by its name
or by its source package (``cuda-compat-13-0`` is built from ``nvidia-graphics-drivers-580``, and is CUDA's
forward-compatibility library set, not a driver) says nothing about which driver runs. What the shell part of
``NvidiaDriverInstall`` prints (rigforge/facts/installed.py) is parsed here:

- ``file<TAB>PATH<TAB>OWNERS``: a kernel module file the running kernel would load (``modinfo -F filename``,
  else a search under /lib/modules/$(uname -r)), and the packages owning it, comma-separated ("" when none);
- ``source<TAB>PATH<TAB>OWNERS``: a DKMS source tree /usr/src/nvidia*, from which DKMS builds the module files;
- ``dkms<TAB>LINE``: ``dkms status`` lines naming an nvidia module;
- ``library<TAB>NAME<TAB>PATH<TAB>OWNERS<TAB>MOUNT``: the user-space driver library the loader finds (libcuda,
  libnvidia-ml), resolved, its owners, and the mount point it lies on.

Real outputs: tests/fixtures/nvidia-h200-x2 (the driver is the VM host's: no module file, the libraries on a
read-only mount of their own).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The kernel modules of one NVIDIA driver (modinfo names).
MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm")
#: The user-space driver libraries whose owner tells where the user-space half came from.
LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1")


@dataclass(frozen=True)
class OwnedFile:
    """A driver file and the packages dpkg says own it (empty: no package does).

    + path: the file (module, DKMS source tree, or resolved library)
    + owners: package names
    + mount: the mount point it lies on (libraries only; "" when unknown)
    """

    path: str
    owners: tuple[str, ...]
    mount: str = ""


@dataclass(frozen=True)
class DriverFiles:
    """The driver's files here: module files, DKMS sources, DKMS status lines, user-space libraries."""

    modules: tuple[OwnedFile, ...] = ()
    sources: tuple[OwnedFile, ...] = ()
    dkms: tuple[str, ...] = ()
    libraries: tuple[OwnedFile, ...] = ()

    @property
    def module_owners(self) -> tuple[str, ...]:
        """The packages owning the module files, or the DKMS sources they are built from (sorted, once each)."""
        return tuple(sorted({owner for owned in (*self.modules, *self.dkms_sources) for owner in owned.owners}))

    @property
    def dkms_sources(self) -> tuple[OwnedFile, ...]:
        """The DKMS source trees, when the module files are DKMS's builds (under updates/dkms or DKMS lists one)."""
        built_by_dkms = bool(self.dkms) or any("/updates/dkms/" in owned.path for owned in self.modules)
        return self.sources if built_by_dkms else ()


NO_DRIVER_FILES = DriverFiles()


def _owners(text: str) -> tuple[str, ...]:
    return tuple(owner.strip().split(":", 1)[0] for owner in text.split(",") if owner.strip())


def parse_driver_files(text: str) -> DriverFiles:
    """Parse the tab-separated lines described in the module docstring; other lines are ignored.

    >>> parse_driver_files("file\\t/lib/modules/6.8.0/updates/dkms/nvidia.ko.zst\\t\\n"
    ...                    "source\\t/usr/src/nvidia-580.95.05\\tnvidia-kernel-source-580-open").module_owners
    ('nvidia-kernel-source-580-open',)
    """
    modules, sources, dkms, libraries = [], [], [], []
    for line in text.splitlines():
        kind, _, rest = line.partition("\t")
        fields = rest.split("\t")
        if kind == "file" and fields[0]:
            modules.append(OwnedFile(fields[0], _owners(fields[1] if len(fields) > 1 else "")))
        elif kind == "source" and fields[0]:
            sources.append(OwnedFile(fields[0], _owners(fields[1] if len(fields) > 1 else "")))
        elif kind == "dkms" and rest.strip():
            dkms.append(rest.strip())
        elif kind == "library" and len(fields) >= 2 and fields[1]:
            libraries.append(OwnedFile(fields[1], _owners(fields[2] if len(fields) > 2 else ""),
                                       fields[3] if len(fields) > 3 else ""))
    return DriverFiles(tuple(modules), tuple(sources), tuple(dkms), tuple(libraries))


def driver_files_command() -> str:
    """The shell that prints those lines (no output at all where there is no driver file)."""
    modules = " ".join(MODULES)
    libraries = " ".join(LIBRARIES)
    return (
        "k=$(uname -r); "
        f"for m in {modules}; do f=$(modinfo -F filename $m 2>/dev/null); "
        "[ -n \"$f\" ] || f=$(find /lib/modules/$k -name \"$m.ko*\" -o -name \"$(echo $m | tr _ -).ko*\" "
        "2>/dev/null | head -n1); "
        "[ -n \"$f\" ] && printf 'file\\t%s\\t%s\\n' \"$f\" \"$(dpkg -S \"$f\" 2>/dev/null | cut -d: -f1)\"; done; "
        "for s in /usr/src/nvidia*; do [ -d \"$s\" ] && "
        "printf 'source\\t%s\\t%s\\n' \"$s\" \"$(dpkg -S \"$s\" 2>/dev/null | head -n1 | cut -d: -f1)\"; done; "
        "dkms status 2>/dev/null | grep -i nvidia | sed 's/^/dkms\\t/'; "
        f"for l in {libraries}; do p=$(ldconfig -p 2>/dev/null | awk -v l=$l '$1 == l {{print $NF; exit}}'); "
        "[ -n \"$p\" ] || continue; r=$(readlink -f \"$p\"); o=$(dpkg -S \"$r\" 2>/dev/null | cut -d: -f1); "
        "[ -n \"$o\" ] || o=$(dpkg -S \"$p\" 2>/dev/null | cut -d: -f1); "
        "d=$(df -P \"$r\" 2>/dev/null | awk 'NR == 2 {print $6}'); "
        "printf 'library\\t%s\\t%s\\t%s\\t%s\\n' $l \"$r\" \"$o\" \"$d\"; "
        "done; true"
    )
