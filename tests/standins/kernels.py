"""STAND-IN kernels, kernel headers and DKMS for the sandbox hosts (sandbox tests only: a container boots
the machine's kernel and cannot build or load a real NVIDIA module).

Modelled on how Debian and Ubuntu behave, because that behaviour is what rigforge's kernel-module check
and fix are about:

- ``linux-image-<K>``: ``/boot/vmlinuz-<K>`` (an empty file) and ``/lib/modules/<K>``; its postinst runs
  DKMS's kernel hook and update-grub, as the real one does through /etc/kernel/postinst.d (whose
  zz-update-grub skips containers, which the sandbox host is; the initramfs hook is left out: there are
  no modules to pack). The hook builds nothing without headers,
  which is the real failure: a kernel upgraded alone boots without the NVIDIA module.
- ``linux-headers-<K>``: ``/usr/src/linux-headers-<K>`` and the ``/lib/modules/<K>/build`` link; its
  postinst runs /etc/kernel/header_postinst.d, where DKMS builds the module.
- ``dkms`` (a package of its own, with DKMS's two kernel hooks, which the stand-in
  ``nvidia-kernel-open-dkms`` depends on): ``autoinstall -k K`` "builds" the module when K's headers are
  there, else fails with DKMS's message, and does nothing when no nvidia module source is installed (real
  dkms with nothing added); ``status`` and ``remove`` as DKMS prints and does them. The "module" is a real
  ELF object whose .modinfo section carries the driver version, so ``modinfo -k K -F version nvidia``
  (what rigforge reads) answers as it does for a real module. Nothing else about it is real.
  Its version sorts just above Debian 12's dkms (3.0.10-8+deb12u1), which Debian's own
  ``nvidia-kernel-dkms`` pulls in: on a host that had Debian's driver, installing the stand-in driver
  upgrades that dkms to the stand-in one, where two packages owning /usr/sbin/dkms would make dpkg refuse.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable
from pathlib import Path

#: The kernel the sandbox image boots (rigforge/sandbox/image.py), and the "update" the tests install.
SANDBOX_KERNEL = "0.0.0-rigforge-sandbox"
UPDATE_KERNEL = "6.1.0-99-amd64"
KERNEL_PACKAGE_VERSION = "6.1.0-99.1"
#: Debian 12's dkms is 3.0.10-8+deb12u1; the stand-in sorts just above it, so installing it upgrades that one.
DKMS_VERSION = "3.0.10-8+deb12u1.rigforge1"


def module_elf(version: str, kernel: str, machine: str, module_license: str = "Dual MIT/GPL") -> bytes:
    """A stand-in ``nvidia.ko``: an ELF relocatable object with only a .modinfo section, which is all that
    ``modinfo`` and ``depmod`` read. Self-contained (struct only), because the stand-in dkms runs this very
    source on the host; the .run stand-in calls it here."""
    import struct

    fields = (("version", version), ("license", module_license), ("name", "nvidia"),
              ("description", "STAND-IN nvidia module (rigforge tests)"), ("vermagic", kernel + " SMP mod_unload "))
    info = b"".join(f"{key}={value}".encode() + b"\0" for key, value in fields)
    names = b"\0.modinfo\0.shstrtab\0"
    names_at = 64 + len(info)
    table_at = (names_at + len(names) + 7) & ~7
    elf_machine = {"x86_64": 62, "aarch64": 183}.get(machine, 62)
    header = struct.pack("<4sBBBBB7xHHIQQQIHHHHHH", b"\x7fELF", 2, 1, 1, 0, 0, 1, elf_machine, 1, 0, 0,
                         table_at, 0, 64, 0, 0, 64, 3, 2)

    def section(name: int, kind: int, offset: int, size: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name, kind, 0, 0, offset, size, 0, 0, 1, 0)

    body = header + info + names
    body += b"\0" * (table_at - len(body))
    return body + section(0, 0, 0, 0) + section(1, 1, 64, len(info)) + section(10, 3, names_at, len(names))


DKMS = textwrap.dedent('''\
    #!/usr/bin/python3
    # {note}
    """Answers the dkms calls made for the nvidia module: autoinstall/install, status, remove."""
    import glob, os, re, struct, subprocess, sys

    MODULE_FILE = "{module}"

    def driver_version():
        text = open(MODULE_FILE).read()
        return re.search(r"Kernel Module for \\S+\\s+(\\S+)", text).group(1)

    {module_elf}

    def autoinstall(kernel):
        if not os.path.exists(MODULE_FILE):
            return 0  # no nvidia module source installed: nothing registered, nothing to build
        if not os.path.exists(f"/lib/modules/{{kernel}}/build"):
            print(f"Error! Your kernel headers for kernel {{kernel}} cannot be found at "
                  f"/lib/modules/{{kernel}}/build or /lib/modules/{{kernel}}/source.\\nPlease install the "
                  f"linux-headers-{{kernel}} package or use the --kernelsourcedir option to tell DKMS where "
                  "it's located.", file=sys.stderr)
            return 1
        version = driver_version()
        target = f"/lib/modules/{{kernel}}/updates/dkms/nvidia.ko"
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target + ".new", "wb") as out:
            out.write(module_elf(version, kernel, os.uname().machine))
        os.replace(target + ".new", target)
        subprocess.run(["depmod", kernel], check=True, stderr=subprocess.DEVNULL)
        print(f"nvidia/{{version}} (stand-in): built and installed for {{kernel}}")
        return 0

    def modules():
        return sorted(glob.glob("/lib/modules/*/updates/dkms/nvidia.ko"))

    def main(args):
        kernel = os.uname().release
        for flag in ("-k", "--kernelver"):
            if flag in args:
                kernel = args[args.index(flag) + 1]
        if args[:1] in (["autoinstall"], ["install"]):
            return autoinstall(kernel)
        if args[:1] == ["status"]:
            for path in modules() if os.path.exists(MODULE_FILE) else []:
                print(f"nvidia/{{driver_version()}}, {{path.split('/')[3]}}, {{os.uname().machine}}: installed")
            return 0
        if args[:1] == ["remove"]:
            for path in modules():
                os.remove(path)
                subprocess.run(["depmod", path.split("/")[3]], check=False, stderr=subprocess.DEVNULL)
            return 0
        print(f"stand-in dkms: {{' '.join(args)}} is not emulated", file=sys.stderr)
        return 2

    sys.exit(main(sys.argv[1:]))
''')

# DKMS's hooks as the real package installs them: a kernel without headers gets a warning, never a failure.
DKMS_HOOK = textwrap.dedent('''\
    #!/bin/sh
    # {note}
    /usr/sbin/dkms autoinstall --kernelver "$1" || echo "dkms: WARNING: Linux headers are missing, which may \\
    explain the above failures. please install the linux-headers-$1 package to fix this."
''')

# Builds for every kernel with headers on install; removes every build on removal, as dh_dkms's scripts do.
DKMS_POSTINST = ("for build in /lib/modules/*/build; do [ -e \"$build\" ] || continue; "
                 "/usr/sbin/dkms autoinstall -k \"$(basename \"$(dirname \"$build\")\")\" || true; done")
DKMS_PRERM = "/usr/sbin/dkms remove nvidia --all || true"


def dkms_files(note: str, module_file: str) -> dict[str, tuple[str, int]]:
    """The files of the stand-in ``dkms`` package: dkms itself and its two kernel hooks."""
    hook = DKMS_HOOK.format(note=note)
    return {
        "/usr/sbin/dkms": (DKMS.format(note=note, module=module_file, module_elf=inspect.getsource(module_elf)),
                           0o755),
        "/etc/kernel/postinst.d/dkms": (hook, 0o755),
        "/etc/kernel/header_postinst.d/dkms": (hook, 0o755),
    }


BuildDeb = Callable[..., Path]


def dkms_deb(build_deb: BuildDeb, work: Path, out_dir: Path, arch: str, note: str, module_file: str) -> Path:
    """The stand-in ``dkms`` package (``DKMS_VERSION``); ``module_file`` is where the driver's module source lies.

    A package of its own, as in Debian, so that it can take over from Debian's dkms by an ordinary upgrade.
    """
    return build_deb(work, out_dir, "dkms", DKMS_VERSION, arch, dkms_files(note, module_file))


def kernel_debs(build_deb: BuildDeb, work: Path, out_dir: Path, arch: str, note: str) -> list[Path]:
    """Headers for the sandbox's kernel and for the update kernel, and the update kernel's image."""
    debs = []
    for kernel in (SANDBOX_KERNEL, UPDATE_KERNEL):
        debs.append(build_deb(work, out_dir, f"linux-headers-{kernel}", KERNEL_PACKAGE_VERSION, arch, {
            f"/usr/src/linux-headers-{kernel}/STANDIN": (f"{note}\n", 0o644),
        }, postinst=(f"mkdir -p /lib/modules/{kernel}\n"
                     f"ln -sfn /usr/src/linux-headers-{kernel} /lib/modules/{kernel}/build\n"
                     "[ ! -d /etc/kernel/header_postinst.d ] || "
                     f"run-parts --report --arg={kernel} /etc/kernel/header_postinst.d"),
            prerm=f"rm -f /lib/modules/{kernel}/build"))
    image = f"/boot/vmlinuz-{UPDATE_KERNEL}"
    debs.append(build_deb(work, out_dir, f"linux-image-{UPDATE_KERNEL}", KERNEL_PACKAGE_VERSION, arch, {
        image: ("", 0o644),
        f"/lib/modules/{UPDATE_KERNEL}/modules.order": ("", 0o644),
    }, postinst=(f"depmod {UPDATE_KERNEL}\n"
                 f"[ ! -x /etc/kernel/postinst.d/dkms ] || /etc/kernel/postinst.d/dkms {UPDATE_KERNEL} {image}\n"
                 # What /etc/kernel/postinst.d/zz-update-grub does on real hardware; it skips containers.
                 "[ ! -e /boot/grub/grub.cfg ] || update-grub 2>/dev/null")))
    return debs
