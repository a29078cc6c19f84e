"""Run every check against a host's facts, and say what stops a deploy.

    facts = gather_facts(host.get_fact)               # pyinfra (deploy code or an operation)
    checks = run_checks(current_profile(), facts)
    for line in table_lines(checks): print(line)
    if blocking_failures(checks): ...                  # deploys/full.py stops this host

``gather_facts`` takes any "fact class -> value" function, so testinfra runs the same commands and
parsers (tests/verify/test_gpus.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rigforge.checks import hardware, platform, secure_boot
from rigforge.checks.driver_reboot import check_driver_reboot
from rigforge.checks.known_failures import check_known_failures
from rigforge.checks.model import Check, HostFacts, failed, ok
from rigforge.checks.nccl import check_nccl_conf
from rigforge.facts import (
    CpuGovernors,
    IommuState,
    KernelCmdline,
    NvidiaDriverParams,
    NvidiaGpus,
    NvidiaLoadedDriver,
    NvidiaModuleKernels,
    NvidiaPciGpus,
    NvidiaTopology,
    NvidiaUvmParams,
    PciAcs,
)
from rigforge.facts.logs import KnownFailureLogs
from rigforge.facts.nccl import NcclConf
from rigforge.facts.packages import NvidiaSmiVersions
from rigforge.facts.secure_boot import SecureBoot
from rigforge.profile import Profile

CheckFunction = Callable[[Profile, HostFacts], "Check | None"]

#: HostFacts field -> the pyinfra fact that fills it.
FACT_SOURCES: dict[str, type] = {
    "smi": NvidiaGpus,
    "pci": NvidiaPciGpus,
    "topology": NvidiaTopology,
    "loaded_driver": NvidiaLoadedDriver,
    "driver_params": NvidiaDriverParams,
    "uvm_params": NvidiaUvmParams,
    "cmdline": KernelCmdline,
    "iommu": IommuState,
    "acs": PciAcs,
    "governors": CpuGovernors,
    "kernel_modules": NvidiaModuleKernels,
    "failure_logs": KnownFailureLogs,
    "secure_boot": SecureBoot,
    "nccl_conf": NcclConf,
    "smi_versions": NvidiaSmiVersions,
}

PRESENCE = "gpus"
NO_GPU = "no NVIDIA GPU found"

#: Checks that need at least one GPU, in table order.
GPU_CHECKS: tuple[CheckFunction, ...] = (
    hardware.check_gpu_count,
    hardware.check_gpu_model,
    hardware.check_compute_capability,
    hardware.check_gpu_memory,
    hardware.check_bar1,
    hardware.check_pcie_gen,
    hardware.check_pcie_width,
    hardware.check_topology,
    hardware.check_persistence_mode,
    hardware.check_power_limit,
    platform.check_driver,
    platform.check_module_options,
    platform.check_force_p2p,
    platform.check_acs,
)

#: Checks of the host itself, run with or without GPUs.
HOST_CHECKS: tuple[CheckFunction, ...] = (
    check_driver_reboot,
    platform.check_kernel_cmdline,
    platform.check_iommu,
    platform.check_cpu_governor,
    platform.check_kernel_module,
    secure_boot.check_secure_boot,
    check_nccl_conf,
    platform.check_model_revision,
)

#: Every check name, in table order (tests/verify parametrizes over these).
CHECK_NAMES: tuple[str, ...] = (
    PRESENCE, "gpu-count", "gpu-model", "compute-capability", "gpu-memory", "bar1", "pcie-gen", "pcie-width",
    "topology", "persistence-mode", "power-limit", "driver", "module-options", "force-p2p", "acs",
    "driver-reboot", "kernel-cmdline", "iommu", "cpu-governor", "kernel-module", "secure-boot", "nccl-conf",
    "model-revision", "known-failures",
)


def gather_facts(get_fact: Callable[[type], Any]) -> HostFacts:
    """Read every fact the checks need with `get_fact` (pyinfra's `host.get_fact`, or an adapter)."""
    return HostFacts(**{field: get_fact(fact) for field, fact in FACT_SOURCES.items()})


def check_presence(profile: Profile, facts: HostFacts) -> Check:
    """GPUs at all: the one clear failure on a host with a GPU profile and no NVIDIA GPU."""
    found = f"{facts.gpu_count} NVIDIA GPU{'s' if facts.gpu_count != 1 else ''}"
    if profile.gpus is None:
        return ok(PRESENCE, "none (profile without gpus)", found)
    expected = f"{profile.gpus.count}x {profile.gpus.model}"
    if facts.gpu_count == 0:
        return failed(PRESENCE, expected, NO_GPU,
                      f"{NO_GPU} (nvidia-smi and the PCI bus list none): run on the rig the profile describes, "
                      "or use a profile without gpus", blocking=True)
    return ok(PRESENCE, expected, found)


def run_checks(profile: Profile, facts: HostFacts) -> list[Check]:
    """Every check that applies, in table order. GPU checks run only when there are GPUs to judge."""
    presence = check_presence(profile, facts)
    checks = [presence]
    if profile.gpus is not None and facts.gpu_count > 0:
        checks += _applied(GPU_CHECKS, profile, facts)
    checks += _applied(HOST_CHECKS, profile, facts)
    # One row per known failure found in the logs (or one ok row): last, as it explains the rest.
    return checks + check_known_failures(profile, facts)


def _applied(functions: Iterable[CheckFunction], profile: Profile, facts: HostFacts) -> list[Check]:
    return [check for function in functions if (check := function(profile, facts)) is not None]


def blocking_failures(checks: Iterable[Check]) -> list[Check]:
    """Failed checks the deploy cannot fix: deploys/full.py stops the host on these."""
    return [check for check in checks if check.verdict == "fail" and check.blocking]


def summary(host_name: str, checks: list[Check]) -> str:
    """`preflight rig2x-a: 12 ok, 3 warn, 1 fail (1 blocking: gpus)`."""
    counts = {verdict: sum(check.verdict == verdict for check in checks) for verdict in ("ok", "warn", "fail")}
    text = f"preflight {host_name}: {counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail"
    blocking = blocking_failures(checks)
    if blocking:
        text += f" ({len(blocking)} blocking: {', '.join(check.name for check in blocking)})"
    return text
