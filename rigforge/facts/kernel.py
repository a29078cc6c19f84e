"""Which kernels have the NVIDIA module: the running one and the one GRUB boots next.

The module a kernel would load is what ``modinfo -k KERNEL nvidia`` finds through that kernel's
modules.dep: DKMS's ``/lib/modules/K/updates/dkms/nvidia.ko*`` or a distribution's prebuilt
``linux-modules-nvidia-*`` package alike. A kernel installed after the driver (an unattended kernel
upgrade) has no module until DKMS builds one, which needs that kernel's headers: the rig then boots
the new kernel without its GPUs. On a container host the running kernel is the machine's, not one
the host installs or boots, so only the next-boot kernel is the host's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api import FactBase

from rigforge.facts.grub import NextBoot, next_boot_kernel
from rigforge.reads.parsing import split_sections

GRUB_CFG = "/boot/grub/grub.cfg"
GRUBENV = "/boot/grub/grubenv"


@dataclass(frozen=True)
class KernelModules:
    """The host's kernels and the NVIDIA module version each has (None: no module).

    + running: ``uname -r``
    + container: the host is a container (its running kernel is the machine's)
    + next_boot: the kernel GRUB boots next; None when neither the menu nor /boot names one
    + next_boot_how: how ``next_boot`` was decided, for messages
    + modules: kernel -> ``modinfo -k`` version of its nvidia module, for the running and every /boot kernel
    """

    running: str
    container: bool
    next_boot: str | None
    next_boot_how: str
    modules: dict[str, str | None]

    def kernels_needing_module(self) -> list[str]:
        """The kernels the host runs or boots next, each once (the running one left out on a container)."""
        wanted = [] if self.container else [self.running]
        if self.next_boot and self.next_boot not in wanted:
            wanted.append(self.next_boot)
        return wanted

    def missing(self, version: str) -> list[str]:
        """Kernels of ``kernels_needing_module`` whose nvidia module is absent or not ``version``."""
        return [kernel for kernel in self.kernels_needing_module() if self.modules.get(kernel) != version]

    def describe(self, kernel: str) -> str:
        """`6.8.0-49-generic (next boot, GRUB default '0'): 595.45.04` / `…: no nvidia module`."""
        roles = [role for role, name in (("running", self.running), ("next boot", self.next_boot))
                 if name == kernel and not (role == "running" and self.container)]
        how = f", {self.next_boot_how}" if kernel == self.next_boot else ""
        module = self.modules.get(kernel) or "no nvidia module"
        return f"{kernel} ({' and '.join(roles) or 'installed'}{how}): {module}"


def parse_kernel_modules(output: str) -> KernelModules:
    """Parse the sections printed by ``NvidiaModuleKernels``'s command."""
    sections = split_sections(output)
    running = sections.get("running", "").strip()
    modules: dict[str, str | None] = {}
    for line in sections.get("modules", "").splitlines():
        kernel, _, version = line.strip().partition(" ")
        if kernel:
            modules[kernel] = version.strip() or None
    boot_kernels = sections.get("boot", "").split()
    if sections.get("grub.cfg", "").strip():
        chosen = next_boot_kernel(sections["grub.cfg"], sections.get("grubenv", ""))
    else:
        chosen = NextBoot(None, "")
    if chosen.kernel is None and boot_kernels:
        chosen = NextBoot(boot_kernels[-1], "newest kernel in /boot (no GRUB menu entry)")
    virt = sections.get("container", "").split()
    container = bool(virt) and virt[0] != "none"  # systemd-detect-virt says "none" on real hardware
    return KernelModules(running, container, chosen.kernel, chosen.how, modules)


class NvidiaModuleKernels(FactBase[KernelModules]):
    """
    Returns the running kernel, the kernel GRUB boots next and, for each of them and every kernel in
    /boot, the version of the nvidia module it would load, as ``KernelModules``.

    .. code:: python

        kernels = host.get_fact(NvidiaModuleKernels)
        if kernels.missing("595.45.04"):
            ...
    """

    def command(self) -> str:
        # /boot kernels version-sorted (oldest first), as grub-mkconfig and the kernel packages sort them.
        return (
            "echo '## running'; uname -r; "
            "echo '## container'; systemd-detect-virt --container 2>/dev/null || "
            "{ test -e /.dockerenv && echo docker; } || true; "
            "echo '## boot'; ls /boot 2>/dev/null | sed -n 's/^vmlinuz-//p' | sort -V; "
            f"echo '## grub.cfg'; cat {GRUB_CFG} 2>/dev/null; "
            f"echo '## grubenv'; cat {GRUBENV} 2>/dev/null; "
            "echo '## modules'; "
            "for kernel in $(uname -r) $(ls /boot 2>/dev/null | sed -n 's/^vmlinuz-//p'); do "
            "echo \"$kernel $(modinfo -k \"$kernel\" -F version nvidia 2>/dev/null | head -n 1)\"; done; true"
        )

    def process(self, output: list[str]) -> KernelModules:
        return parse_kernel_modules("\n".join(output))
