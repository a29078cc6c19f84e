"""pyinfra facts about NVIDIA GPUs and the host around them.

Each fact runs one cheap command that exits 0 whether or not the tool or file exists, and hands
its output to a pure parser in the same module (tested on real captures in tests/fixtures/gpu).
Hosts without GPUs, driver or tool get a plain "not present" value, never an exception:

=================== ==================================== =====================================
fact                returns                              when absent
=================== ==================================== =====================================
NvidiaGpus          GpuInventory (gpus, driver, CUDA)    NO_NVIDIA_SMI (smi_found=False)
NvidiaTopology      GpuTopology                          None
NvidiaLoadedDriver  LoadedDriver (version, open module)  None (module not loaded)
NvidiaDriverParams  dict /proc/driver/nvidia/params      None (module not loaded)
NvidiaUvmParams     dict nvidia_uvm parameters           None (module not loaded)
KernelCmdline       tuple of kernel parameters           ()
IommuState          IommuStatus (mode, groups)           mode "unknown"
PciAcs              AcsReport (ports with ACS)           None (lspci missing)
NvidiaPciGpus       PciGpuReport (GPUs on the PCI bus)   empty gpus (no NVIDIA GPU)
CpuGovernors        dict cpu -> governor                 None (no cpufreq)
NvidiaModuleKernels KernelModules (per kernel: module)   running kernel only, no module
NumaLayout          tuple of NumaNode                    ()
KnownFailureLogs    FailureLogs (kernel/engine/bench)    NO_LOGS (no line holds a needle)
SecureBoot          SecureBootStatus (state, DKMS key)   state "unsupported" (no EFI)
NvidiaDriverInstall DriverInstall (packages, module)     NO_DRIVER_INSTALL (installed.py)
CudaToolkits        CudaInstall (cuda-* trees, link)     NO_CUDA (installed.py)
GpuComputeProcesses Holders (GPU processes, cgroups)     NO_HOLDERS (holders.py)
PortListeners       Holders (listeners on a port)        NO_HOLDERS (holders.py)
DpkgLockHolders     tuple of LockHolder                  () (holders.py)
ManagedByRigforge   True: carries rigforge's header      None (no such file; managed.py)
NcclConf            NcclConfFile (ours, KEY=value)       None (no /etc/nccl.conf; nccl.py)
=================== ==================================== =====================================

May import: reads, recipes, serving, images, known_failures, profile.
"""

from rigforge.facts.driver import (
    LoadedDriver,
    NvidiaDriverParams,
    NvidiaLoadedDriver,
    NvidiaUvmParams,
    module_param_enabled,
    parse_registry_dwords,
)
from rigforge.facts.gpu import NO_NVIDIA_SMI, Gpu, GpuInventory, NvidiaGpus
from rigforge.facts.host import (
    CpuGovernors,
    IommuState,
    IommuStatus,
    KernelCmdline,
    NumaLayout,
    NumaNode,
    cmdline_has,
    cmdline_value,
)
from rigforge.facts.kernel import KernelModules, NvidiaModuleKernels
from rigforge.facts.logs import NO_LOGS, FailureLogs, KnownFailureLogs
from rigforge.facts.pci import AcsPort, AcsReport, PciAcs
from rigforge.facts.pci_gpus import NvidiaPciGpus, PciGpu, PciGpuReport
from rigforge.facts.secure_boot import SecureBoot, SecureBootStatus
from rigforge.facts.topology import GpuTopology, NvidiaTopology, link_class, link_rank, worst_gpu_link

__all__ = [
    "NO_LOGS",
    "NO_NVIDIA_SMI",
    "AcsPort",
    "AcsReport",
    "CpuGovernors",
    "FailureLogs",
    "Gpu",
    "GpuInventory",
    "GpuTopology",
    "IommuState",
    "IommuStatus",
    "KernelCmdline",
    "KernelModules",
    "KnownFailureLogs",
    "LoadedDriver",
    "NumaLayout",
    "NumaNode",
    "NvidiaDriverParams",
    "NvidiaGpus",
    "NvidiaLoadedDriver",
    "NvidiaModuleKernels",
    "NvidiaPciGpus",
    "NvidiaTopology",
    "NvidiaUvmParams",
    "PciAcs",
    "PciGpu",
    "PciGpuReport",
    "SecureBoot",
    "SecureBootStatus",
    "cmdline_has",
    "cmdline_value",
    "link_class",
    "link_rank",
    "worst_gpu_link",
    "module_param_enabled",
    "parse_registry_dwords",
]
