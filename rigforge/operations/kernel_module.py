"""The NVIDIA module for every kernel the host runs or boots next.

DKMS builds the module for a kernel whose headers are installed: when the driver package is installed,
and, through DKMS's kernel hooks, when a kernel or its headers arrive later. A kernel that arrived
without headers (an unattended upgrade pulls ``linux-image-*`` only) gets no module, and the rig boots it
without GPUs. The driver role installs the headers of the kernels that need them
(``kernel_headers``), then ``nvidia_module_for_kernels`` builds what is still missing and fails, with
the fix, when DKMS cannot: before the reboot step, so the rig never reboots into a kernel without it.
"""

from __future__ import annotations

import shlex

from pyinfra import host, state
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.host import Host
from pyinfra.api.state import State

from rigforge.checks.platform import module_fix
from rigforge.facts.kernel import KernelModules, NvidiaModuleKernels
from rigforge.facts.packages import DpkgPackages
from rigforge.operations.nvidia_apt import installed_driver_version


def kernel_headers(kernels: KernelModules) -> list[str]:
    """The headers packages of the kernels that need the module (Debian and Ubuntu name them alike)."""
    return [f"linux-headers-{kernel}" for kernel in kernels.kernels_needing_module()]


def missing_module_lines(kernels: KernelModules, version: str) -> list[str]:
    """One line per kernel that needs the module at ``version`` and lacks it, with the fix (empty: none)."""
    missing = kernels.missing(version)
    return [f"the NVIDIA {version} module is missing for {kernels.describe(kernel)}; fix: {module_fix([kernel])}"
            for kernel in missing]


@operation()
def nvidia_module_for_kernels(version: str, packages: tuple[str, ...]):
    """
    Build the nvidia module with DKMS for each kernel the host runs or boots next that lacks it at
    ``version``; fail, saying which kernel and how to fix it, when DKMS could not.

    + version: the driver version the module must have
    + packages: the top-level driver packages (while they are not at ``version``, their install builds it)

    **Example:**

    .. code:: python

        nvidia_module_for_kernels(name="NVIDIA module for every kernel", version="595.45.04",
                                  packages=("nvidia-open",))
    """
    if installed_driver_version(host.get_fact(DpkgPackages), packages) != version:
        host.noop(f"the driver {version} install builds the module")
        return
    kernels = host.get_fact(NvidiaModuleKernels)
    missing = kernels.missing(version)
    if not missing:
        host.noop(f"nvidia {version} is built for {', '.join(kernels.kernels_needing_module()) or 'no kernel'}")
        return
    for kernel in missing:
        # DKMS's own error (headers missing, build failed) is printed; the check after it decides.
        yield StringCommand("dkms", "autoinstall", "-k", shlex.quote(kernel), "||", "true")
    if state.is_executing:
        yield FunctionCommand(_check_built, (version,), {})


def _check_built(state: State, host: Host, version: str) -> bool:
    del state
    lines = missing_module_lines(host.get_fact(NvidiaModuleKernels), version)
    for line in lines:
        host.log_styled(line, fg="red")
    return not lines
