"""GPU hardware checks: count, model, memory, compute capability, BAR1, PCIe link, topology, power.

Each reads nvidia-smi where the driver answers and the PCI bus (lspci/sysfs) before that, so a
fresh rig is judged on its hardware before rigforge installs anything. What only nvidia-smi can
measure waits for the driver ("re-run preflight after the deploy"). The runner calls these only
when the profile has GPUs and the host has at least one (rigforge.checks.run).
"""

from __future__ import annotations

import re

from rigforge.checks.model import Check, HostFacts, advice, counted, deploy_fixes, failed, ok, per_gpu
from rigforge.facts import link_rank, worst_gpu_link
from rigforge.profile import Gpus, Profile

AFTER_DRIVER = "nvidia-smi measures it once the driver is installed: re-run preflight after the deploy"
_MEMORY_TOLERANCE = 0.01


def _gpus(profile: Profile) -> Gpus:
    assert profile.gpus is not None, "hardware checks run only for profiles with gpus"
    return profile.gpus


def check_gpu_count(profile: Profile, facts: HostFacts) -> Check:
    """As many GPUs as the profile, all of them visible to nvidia-smi once the driver is there."""
    expected = _gpus(profile).count
    on_bus, in_smi = len(facts.pci.gpus), len(facts.smi.gpus)
    found = f"{in_smi} (nvidia-smi)" if in_smi else f"{on_bus} (PCI bus)"
    if facts.gpu_count < expected:
        return failed("gpu-count", str(expected), found,
                      f"only {facts.gpu_count} of {expected} GPUs found: check seating, power cables, riser and "
                      "the BIOS (Above 4G decoding)", blocking=True)
    if facts.smi.gpus and on_bus > in_smi:
        return deploy_fixes("gpu-count", str(expected), f"{in_smi} in nvidia-smi, {on_bus} on the PCI bus",
                            "nvidia-smi misses GPUs that are on the bus: check dmesg for Xid / 'fallen off the bus'; "
                            "Blackwell needs the open kernel modules, which the deploy installs")
    if facts.gpu_count > expected:
        return advice("gpu-count", str(expected), found,
                      f"the engine uses {expected} GPUs (tensor parallel size); the others stay idle")
    return ok("gpu-count", str(expected), found)


def check_gpu_model(profile: Profile, facts: HostFacts) -> Check:
    """Every GPU is the model the profile names (nvidia-smi's name, or the PCI id before the driver)."""
    wanted = _gpus(profile).model
    names = [gpu.name for gpu in facts.smi.gpus] or [gpu.product for gpu in facts.pci.gpus]
    others = [name for name in names if wanted.lower() not in name.lower()]
    if not others:
        return ok("gpu-model", wanted, counted(names))
    unknown = [gpu.device_id for gpu in facts.pci.gpus if not facts.smi.gpus and not gpu.identified]
    if unknown and len(unknown) == len(others):
        return deploy_fixes("gpu-model", wanted, counted(names),
                            f"PCI id {', '.join(sorted(set(map(str, unknown))))} is not one rigforge knows: "
                            f"{AFTER_DRIVER}")
    return failed("gpu-model", wanted, counted(names),
                  f"this host has {counted(others)}, not {wanted}: use a profile written for these GPUs",
                  blocking=True)


def check_compute_capability(profile: Profile, facts: HostFacts) -> Check:
    """The compute capability the engine's kernels are built for (12.0 = SM120)."""
    wanted = _gpus(profile).compute_capability
    if not facts.smi.gpus:
        return deploy_fixes("compute-capability", wanted, "unknown (no driver yet)", AFTER_DRIVER)
    caps = [gpu.compute_capability for gpu in facts.smi.gpus]
    if None in caps:
        return advice("compute-capability", wanted, per_gpu(caps), "this nvidia-smi does not report compute_cap")
    if any(cap != wanted for cap in caps):
        return failed("compute-capability", wanted, per_gpu(caps),
                      f"the engine image's kernels are built for compute capability {wanted} "
                      f"(sm_{wanted.replace('.', '')}): use a profile for these GPUs", blocking=True)
    return ok("compute-capability", wanted, per_gpu(caps))


def check_gpu_memory(profile: Profile, facts: HostFacts) -> Check:
    """Memory per GPU as nvidia-smi reports it (97887 MiB on an RTX PRO 6000)."""
    wanted = _gpus(profile).memory_mib
    expected = f"{wanted} MiB"
    if not facts.smi.gpus:
        return deploy_fixes("gpu-memory", expected, "unknown (no driver yet)", AFTER_DRIVER)
    sizes = [gpu.memory_total_mib for gpu in facts.smi.gpus]
    known = [size for size in sizes if size is not None]
    if not known or len(known) < len(sizes):
        return advice("gpu-memory", expected, per_gpu(sizes, " MiB"), "nvidia-smi did not report memory")
    if min(known) < wanted * (1 - _MEMORY_TOLERANCE):
        return failed("gpu-memory", expected, per_gpu(sizes, " MiB"),
                      "less memory than the profile plans for: another GPU model, or MIG/ECC taking memory",
                      blocking=True)
    if max(known) > wanted * (1 + _MEMORY_TOLERANCE):
        return advice("gpu-memory", expected, per_gpu(sizes, " MiB"),
                      "more memory than the profile plans for (another GPU model): the model fits, but memory "
                      "fractions and batch sizes were chosen for the smaller card")
    return ok("gpu-memory", expected, per_gpu(sizes, " MiB"))


def check_bar1(profile: Profile, facts: HostFacts) -> Check:
    """BAR1 per GPU: 131072 MiB on Blackwell with Resizable BAR; 256 MiB means ReBAR is off (rig-facts §1.6)."""
    wanted = _gpus(profile).bar1_mib
    expected = f">= {wanted} MiB"
    sizes = [gpu.bar1_total_mib for gpu in facts.smi.gpus] or [gpu.bar1_mib for gpu in facts.pci.gpus]
    small = [size for size in sizes if size is not None and size < wanted]
    if small:
        return failed("bar1", expected, per_gpu(sizes, " MiB"),
                      f"BAR1 {min(small)} MiB: enable Resizable BAR and Above 4G decoding in the BIOS "
                      f"(expect {wanted} MiB); a small BAR1 cripples P2P", blocking=True)
    if None in sizes:
        return deploy_fixes("bar1", expected, per_gpu(sizes, " MiB"),
                            "BAR size unreadable: the base role installs pciutils (lspci); the driver reports it too")
    return ok("bar1", expected, per_gpu(sizes, " MiB"))


def check_pcie_gen(profile: Profile, facts: HostFacts) -> Check:
    """The PCIe generation each GPU's link can reach (an idle link trains down and is not a fault)."""
    wanted = _gpus(profile).pcie_gen
    expected = f"Gen{wanted}"
    if facts.smi.gpus:
        best = [gpu.pcie_gen_max for gpu in facts.smi.gpus]
        now = [gpu.pcie_gen_current for gpu in facts.smi.gpus]
    else:
        best = [gpu.link_gen_max for gpu in facts.pci.gpus]
        now = [gpu.link_gen_now for gpu in facts.pci.gpus]
    slow = [index for index, gen in enumerate(best) if gen is not None and gen < wanted]
    found = per_gpu([None if high is None else f"Gen{high}" + (f" (now Gen{low})" if low not in (None, high) else "")
                     for high, low in zip(best, now, strict=True)])
    if slow:
        return failed("pcie-gen", expected, found,
                      f"GPU{slow[0]} links at most Gen{best[slow[0]]}: use a Gen{wanted} slot and riser/retimer and "
                      "check the BIOS link speed setting", blocking=True)
    if None in best:
        return deploy_fixes("pcie-gen", expected, found, "link unreadable: the base role installs pciutils (lspci)")
    if not facts.smi.gpus and any(gen is not None and gen < wanted for gen in now):
        return advice("pcie-gen", expected, found,
                      "the link runs slower now: idle GPUs train down; nvidia-smi's max_link_gen (after the "
                      "deploy) tells a slot limit from power saving")
    return ok("pcie-gen", expected, found)


def check_pcie_width(profile: Profile, facts: HostFacts) -> Check:
    """Link width per GPU: one GPU at x4/x8 bottlenecks every tensor-parallel all-reduce (rig-facts §1.6)."""
    wanted = _gpus(profile).pcie_width
    expected = f"x{wanted}"
    if facts.smi.gpus:
        widths = [gpu.pcie_width_current for gpu in facts.smi.gpus]
    else:
        widths = [gpu.link_width_now for gpu in facts.pci.gpus]
    found = per_gpu([None if width is None else f"x{width}" for width in widths])
    narrow = [index for index, width in enumerate(widths) if width is not None and width < wanted]
    if narrow:
        return failed("pcie-width", expected, found,
                      f"GPU{narrow[0]} runs at x{widths[narrow[0]]}: reseat it, or move it to a slot wired x{wanted} "
                      "(lspci LnkSta shows the width)", blocking=True)
    if None in widths:
        return deploy_fixes("pcie-width", expected, found, "link unreadable: the base role installs pciutils (lspci)")
    return ok("pcie-width", expected, found)


def _link_class(link: str) -> str:
    return "NV" if re.fullmatch(r"NV\d+", link) else link


def check_topology(profile: Profile, facts: HostFacts) -> Check:
    """The slowest path between any two GPUs (`nvidia-smi topo -m`) against the profile's class."""
    wanted = _gpus(profile).topology
    if facts.topology is None:
        return deploy_fixes("topology", wanted, "unknown (no driver yet)", AFTER_DRIVER)
    if len(facts.topology.gpus) < 2:
        return advice("topology", wanted, f"{len(facts.topology.gpus)} GPU: no pair", "no GPU pair to judge")
    worst = worst_gpu_link(facts.topology)
    found = f"{worst} (slowest GPU pair)"
    found_class = _link_class(worst)
    if found_class == wanted:
        return ok("topology", wanted, found)
    rank_found, rank_wanted = link_rank(worst), link_rank("NV#" if wanted == "NV" else wanted)
    if rank_found > rank_wanted:
        return failed("topology", wanted, found,
                      f"topology {found_class} but profile expects {wanted}: move the GPUs (e.g. behind one PCIe "
                      "switch) or use a profile written for this layout", blocking=True)
    return advice("topology", wanted, found,
                  f"topology {worst} is faster than the profile's {wanted}: its P2P settings (ForceP2P, ACS) "
                  f"were chosen for {wanted}")


def check_persistence_mode(profile: Profile, facts: HostFacts) -> Check:
    """Persistence mode, set after every boot (rig-facts §2.2)."""
    wanted = _gpus(profile).persistence_mode
    expected = "enabled" if wanted else "disabled"
    if not facts.smi.gpus:
        return deploy_fixes("persistence-mode", expected, "unknown (no driver yet)", AFTER_DRIVER)
    modes = [None if gpu.persistence_mode is None else ("enabled" if gpu.persistence_mode else "disabled")
             for gpu in facts.smi.gpus]
    if any(mode != expected for mode in modes):
        return deploy_fixes("persistence-mode", expected, per_gpu(modes),
                            f"the deploy sets persistence mode {expected} at every boot (nvidia-persistenced)")
    return ok("persistence-mode", expected, per_gpu(modes))


def check_power_limit(profile: Profile, facts: HostFacts) -> Check:
    """Enforced power limit per GPU, within what each card accepts (600 W Server Edition, 300 W Max-Q)."""
    wanted = _gpus(profile).power_limit_w
    if wanted is None:
        return ok("power-limit", "not managed", "-")
    expected = f"{wanted} W"
    if not facts.smi.gpus:
        return deploy_fixes("power-limit", expected, "unknown (no driver yet)", AFTER_DRIVER)
    for gpu in facts.smi.gpus:
        low, high = gpu.power_limit_min_w, gpu.power_limit_max_w
        if low is not None and high is not None and not low <= wanted <= high:
            return failed("power-limit", expected, f"GPU{gpu.index} accepts {low:.0f}-{high:.0f} W",
                          "set gpus.power_limit_w within what the card accepts (a Max-Q card stops at 300 W)",
                          blocking=True)
    limits = [None if gpu.power_limit_enforced_w is None else round(gpu.power_limit_enforced_w)
              for gpu in facts.smi.gpus]
    if any(limit is None or abs(limit - wanted) > 1 for limit in limits):
        return deploy_fixes("power-limit", expected, per_gpu(limits, " W"),
                            f"the deploy sets {wanted} W at every boot (nvidia-smi -pl)")
    return ok("power-limit", expected, per_gpu(limits, " W"))
