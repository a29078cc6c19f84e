"""Driver, module, P2P, ACS, IOMMU, command line, governor and model-pin checks: ok, warn and fail paths.

Facts come from the real H200 capture unless a test builds one state the lent machines cannot
show (a driver mismatch, a translating IOMMU, ACS on switch ports); those are marked hand-written.
"""

from __future__ import annotations

from dataclasses import replace

from rigforge.checks import platform
from rigforge.facts import NO_NVIDIA_SMI, IommuStatus, LoadedDriver
from rigforge.facts.host import parse_cmdline
from rigforge.facts.pci import parse_lspci_acs
from tests.support_checks import GPU_CAPTURES, H200, capture_facts, empty_facts, profile, with_profile

ACS_EXCERPT = GPU_CAPTURES / "lspci-vvv-acs-excerpt-from-rig-facts.txt"


def h200_driver_profile(version: str = "580.159.04"):
    base = profile("2x-pix")
    assert base.driver is not None
    return with_profile(base, driver={"version": version})


def test_driver_versions() -> None:
    facts = capture_facts(H200)
    old = platform.check_driver(profile("2x-pix"), facts)
    assert (old.verdict, old.deploy_fixes, old.found) == ("warn", True, "loaded 580.159.04 (open)")
    assert old.fix == "deploy installs 595.45.04 and reboots to load it"
    assert platform.check_driver(h200_driver_profile(), facts).verdict == "ok"
    proprietary = with_profile(h200_driver_profile(), driver={"flavor": "proprietary"})
    assert "proprietary kernel modules" in platform.check_driver(proprietary, facts).fix
    # Installed 595, still running 580 until the reboot (hand-written: one upgrade's state).
    upgraded = replace(facts, smi=replace(facts.smi, driver_version="595.45.04"))
    pending = platform.check_driver(profile("2x-pix"), upgraded)
    assert pending.found == "loaded 580.159.04 (open), installed 595.45.04" and pending.deploy_fixes


def test_driver_absent_mismatched_or_not_loaded() -> None:
    fresh = platform.check_driver(profile("2x-pix"), empty_facts())
    assert (fresh.verdict, fresh.blocking, fresh.found) == ("warn", False, "not installed")
    assert fresh.fix == "not installed yet: deploy installs it"
    # nvidia-smi's message after a package upgrade without reboot (hand-written, NVML's wording).
    mismatch = replace(capture_facts(H200), smi=replace(NO_NVIDIA_SMI, smi_found=True,
                       error="Failed to initialize NVML: Driver/library version mismatch"))
    check = platform.check_driver(profile("2x-pix"), mismatch)
    assert check.deploy_fixes and "reboot" in check.fix and "mismatch" in check.found
    unloaded = replace(empty_facts(), smi=replace(NO_NVIDIA_SMI, smi_found=True, driver_version="595.45.04"))
    assert platform.check_driver(profile("2x-pix"), unloaded).found == "installed 595.45.04, not loaded"
    assert platform.check_driver(profile("sandbox"), empty_facts()) is None


def test_module_options_uvm_disable_hmm() -> None:
    facts = capture_facts(H200)
    missing = platform.check_module_options(profile("2x-pix"), facts)
    assert (missing.verdict, missing.deploy_fixes) == ("warn", True)
    assert (missing.expected, missing.found) == ("nvidia_uvm uvm_disable_hmm=1", "uvm_disable_hmm=N")
    assert "NCCL P2P locks up" in missing.fix
    # sysfs shows the bool parameter as Y once modprobe.d sets uvm_disable_hmm=1.
    loaded = replace(facts, uvm_params={**(facts.uvm_params or {}), "uvm_disable_hmm": "Y"})
    assert platform.check_module_options(profile("2x-pix"), loaded).verdict == "ok"
    not_loaded = platform.check_module_options(profile("2x-pix"), empty_facts())
    assert not_loaded.deploy_fixes and "nvidia_uvm not loaded" in not_loaded.found
    nvreg = with_profile(profile("2x-pix"), modprobe={"options": {"nvidia": {"NVreg_EnableResizableBar": 1}}})
    rebar = platform.check_module_options(nvreg, facts)  # the H200 VM loads nvidia with EnableResizableBar: 0
    assert rebar.verdict == "warn" and rebar.found == "NVreg_EnableResizableBar=0"
    assert platform.check_module_options(profile("sandbox"), facts) is None


def test_force_p2p() -> None:
    facts = capture_facts(H200)
    assert platform.check_force_p2p(profile("2x-pix"), facts).verdict == "ok"
    forced = replace(facts, driver_params={**(facts.driver_params or {}),
                                           "RegistryDwords": "ForceP2P=0x11;RMForceP2PType=1;RMPcieP2PType=2"})
    on_pix = platform.check_force_p2p(profile("2x-pix"), forced)
    assert (on_pix.verdict, on_pix.blocking) == ("fail", False)
    assert on_pix.fix.startswith("ForceP2P override present on a PIX rig: remove it")
    node = profile("4x-threadripper")
    assert node.modprobe.force_p2p_override
    assert platform.check_force_p2p(node, forced).verdict == "ok"
    absent = platform.check_force_p2p(node, facts)
    assert absent.verdict == "warn" and absent.deploy_fixes
    assert platform.check_force_p2p(profile("2x-pix"), empty_facts()).found == "unknown (driver not loaded)"


def test_acs_on_a_switch_rig() -> None:
    # Hand-written excerpt (rig-facts §1.7): a root port and a switch port with ReqRedir+ CmpltRedir+.
    facts = replace(capture_facts(H200), acs=parse_lspci_acs(ACS_EXCERPT.read_text()))
    cleared_at_boot = platform.check_acs(profile("2x-pix"), facts)  # 2x-pix boots with pci=noacs
    assert (cleared_at_boot.verdict, cleared_at_boot.deploy_fixes) == ("warn", True)
    assert cleared_at_boot.found == "redirect on 2 ports (40:01.1, 42:00.0)" and "pci=noacs" in cleared_at_boot.fix
    no_remedy = with_profile(profile("2x-pix"), boot={"kernel_params": ["iommu=pt"]})
    left = platform.check_acs(no_remedy, facts)
    assert (left.verdict, left.blocking) == ("fail", False) and "tuning.disable_acs" in left.fix
    by_script = with_profile(no_remedy, tuning={"disable_acs": True})
    assert "setpci" in platform.check_acs(by_script, facts).fix
    assert platform.check_acs(profile("2x-pix"), capture_facts(H200)).verdict == "ok"  # real: no ACS ports
    assert platform.check_acs(profile("2x-pix"), empty_facts()).found == "unknown (lspci missing)"
    hidden = replace(facts, acs=replace(facts.acs, config_space_hidden=True))
    assert platform.check_acs(profile("2x-pix"), hidden).verdict == "warn"
    assert platform.check_acs(profile("4x-threadripper"), facts) is None  # NODE: no switch to clear


def test_kernel_cmdline() -> None:
    missing = platform.check_kernel_cmdline(profile("2x-pix"), capture_facts(H200))
    assert (missing.verdict, missing.deploy_fixes) == ("warn", True)
    # The VM boots with pci=realloc=off and mitigations=auto,...: neither counts.
    assert missing.found == "missing pci=noacs,realloc iommu=pt mitigations=off pcie_aspm=off pcie_port_pm=off"
    booted = parse_cmdline("BOOT_IMAGE=/vmlinuz ro quiet pci=noacs pci=realloc iommu=pt mitigations=off "
                           "pcie_aspm=off pcie_port_pm=off")
    assert platform.check_kernel_cmdline(profile("2x-pix"), replace(empty_facts(), cmdline=booted)).verdict == "ok"
    half = parse_cmdline("pci=noacs iommu=pt mitigations=off pcie_aspm=off pcie_port_pm=off")
    assert platform.check_kernel_cmdline(profile("2x-pix"), replace(empty_facts(), cmdline=half)).found == (
        "missing pci=noacs,realloc")
    assert platform.check_kernel_cmdline(profile("sandbox"), empty_facts()).verdict == "ok"


def test_iommu() -> None:
    assert platform.check_iommu(profile("2x-pix"), capture_facts(H200)).found == "off (0 groups)"
    # Hand-written states the VMs cannot show: a translating IOMMU, and groups of unknown type.
    translated = replace(empty_facts(), iommu=IommuStatus("translated", None, 64, {"DMA-FQ": 64}))
    fixable = platform.check_iommu(profile("2x-pix"), translated)
    assert (fixable.verdict, fixable.deploy_fixes, fixable.expected) == ("warn", True, "passthrough (iommu=pt)")
    silent = with_profile(profile("2x-pix"), boot={"kernel_params": ["pcie_aspm=off"]})
    advice = platform.check_iommu(silent, translated)
    assert advice.verdict == "warn" and not advice.deploy_fixes and "NCCL_P2P_DISABLE" in advice.fix
    unknown = replace(empty_facts(), iommu=IommuStatus("unknown", None, 3, {}))
    assert platform.check_iommu(profile("2x-pix"), unknown).verdict == "warn"
    passthrough = replace(empty_facts(), iommu=IommuStatus("passthrough", "passthrough", 64, {"identity": 64}))
    assert platform.check_iommu(profile("2x-pix"), passthrough).verdict == "ok"


def test_cpu_governor() -> None:
    vm = platform.check_cpu_governor(profile("2x-pix"), capture_facts(H200))
    assert (vm.verdict, vm.deploy_fixes, vm.found) == ("warn", False, "no cpufreq")
    mixed = replace(empty_facts(), governors={0: "schedutil", 1: "schedutil", 2: "performance"})
    check = platform.check_cpu_governor(profile("2x-pix"), mixed)
    assert (check.verdict, check.deploy_fixes) == ("warn", True)
    assert check.found == "performance on 1 CPUs, schedutil on 2 CPUs"
    pinned = replace(empty_facts(), governors={0: "performance", 1: "performance"})
    assert platform.check_cpu_governor(profile("2x-pix"), pinned).verdict == "ok"
    assert platform.check_cpu_governor(profile("sandbox"), mixed).verdict == "ok"


def test_model_revision() -> None:
    branch = platform.check_model_revision(profile("2x-pix"), empty_facts())
    assert (branch.verdict, branch.deploy_fixes) == ("warn", False)
    assert branch.fix.startswith("model revision 'main' is not pinned")
    pinned = with_profile(profile("2x-pix"), model={"revision": "0123456789abcdef0123456789abcdef01234567"})
    assert platform.check_model_revision(pinned, empty_facts()).verdict == "ok"
    assert platform.check_model_revision(profile("sandbox"), empty_facts()).found == "1 file with sha256"


def test_loaded_driver_fact_shape() -> None:
    # The loaded-driver fact of the real capture, as the driver check reads it.
    loaded = capture_facts(H200).loaded_driver
    assert loaded == LoadedDriver(version="580.159.04", open_kernel_module=True)
