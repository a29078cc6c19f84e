"""What a check returns, and the facts every check reads.

A check is a pure function ``(Profile, HostFacts) -> Check | None`` (None: it does not apply to
this profile). Three readers share the result: the preflight deploy prints it as a table, the
testinfra suite asserts it, and ``deploys/full.py`` stops on the blocking ones.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rigforge.facts import (
    AcsReport,
    GpuInventory,
    GpuTopology,
    IommuStatus,
    KernelModules,
    LoadedDriver,
    PciGpuReport,
)
from rigforge.facts.logs import FailureLogs
from rigforge.facts.nccl import NcclConfFile
from rigforge.facts.packages import SmiVersions
from rigforge.facts.secure_boot import SecureBootStatus

Verdict = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    """One expected-versus-found judgement about a host.

    + name: stable id (`gpu-model`), also the test id in tests/verify
    + expected: what the profile asks for, in words
    + found: what the host has
    + verdict: `ok`; `warn` (differs but the deploy fixes it, or only advice); `fail` (differs and matters)
    + fix: what to do about it, from rig-facts ("" when ok)
    + blocking: the deploy cannot fix it (hardware, BIOS, topology): deploys/full.py stops
    + deploy_fixes: deploys/full.py is what makes it hold, so after a deploy it must be ok
    """

    name: str
    expected: str
    found: str
    verdict: Verdict
    fix: str = ""
    blocking: bool = False
    deploy_fixes: bool = False

    @property
    def holds_after_deploy(self) -> bool:
        """What tests/verify asserts: ok, or a warn that is only advice."""
        return self.verdict == "ok" or (self.verdict == "warn" and not self.deploy_fixes)

    def describe(self) -> str:
        """One line for logs and assertion messages."""
        text = f"{self.name}: expected {self.expected}, found {self.found} -> {self.verdict}"
        if self.blocking:
            text += " (blocking)"
        return f"{text}; fix: {self.fix}" if self.fix else text


def ok(name: str, expected: str, found: str) -> Check:
    """The host matches the profile."""
    return Check(name, expected, found, "ok")


def advice(name: str, expected: str, found: str, fix: str) -> Check:
    """Worth knowing, but neither wrong for the profile nor something the deploy changes."""
    return Check(name, expected, found, "warn", fix)


def deploy_fixes(name: str, expected: str, found: str, fix: str) -> Check:
    """Differs from the profile now; the deploy changes it (a warn before, a failure after a deploy)."""
    return Check(name, expected, found, "warn", fix, deploy_fixes=True)


def failed(name: str, expected: str, found: str, fix: str, blocking: bool) -> Check:
    """Differs from the profile in a way that matters; blocking when the deploy cannot fix it."""
    return Check(name, expected, found, "fail", fix, blocking=blocking)


@dataclass(frozen=True)
class HostFacts:
    """Everything the checks read, one fact each (see rigforge.facts for the 'absent' values)."""

    smi: GpuInventory
    pci: PciGpuReport
    topology: GpuTopology | None
    loaded_driver: LoadedDriver | None
    driver_params: dict[str, str] | None
    uvm_params: dict[str, str] | None
    cmdline: tuple[str, ...]
    iommu: IommuStatus
    acs: AcsReport | None
    governors: dict[int, str] | None
    kernel_modules: KernelModules | None = None
    failure_logs: FailureLogs | None = None
    secure_boot: SecureBootStatus | None = None
    nccl_conf: NcclConfFile | None = None
    smi_versions: SmiVersions | None = None

    @property
    def gpu_count(self) -> int:
        """GPUs found: by nvidia-smi where it answers, else on the PCI bus."""
        return max(len(self.smi.gpus), len(self.pci.gpus))


def per_gpu(values: Sequence[object], unit: str = "") -> str:
    """`131072 MiB on all 2` when the GPUs agree, else `GPU0 131072 MiB, GPU1 256 MiB`."""
    shown = ["?" if value is None else f"{value}{unit}" for value in values]
    if len(set(shown)) == 1:
        return shown[0] if len(shown) == 1 else f"{shown[0]} on all {len(shown)}"
    return ", ".join(f"GPU{index} {value}" for index, value in enumerate(shown))


def counted(names: Sequence[str]) -> str:
    """`2x NVIDIA H200` / `NVIDIA H200, NVIDIA H100 80GB HBM3`."""
    return ", ".join(f"{count}x {name}" if count > 1 else name for name, count in Counter(names).items())
