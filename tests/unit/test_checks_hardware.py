"""GPU hardware checks on real captures: ok, warn and fail paths.

Facts come from the real H100/H200 captures (tests/fixtures/gpu, device-run) and the hand-written
RTX PRO 6000 nvidia-smi excerpt (GPU1 misconfigured: BAR1 256 MiB, persistence off, 300 W, Gen1 x8).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rigforge.checks import hardware
from rigforge.facts import NO_NVIDIA_SMI
from tests.support_checks import H100, H200, capture_facts, profile, rtx_pro_6000_facts


def before_driver(folder: Path = H200):
    """The same machine as a fresh rig: GPUs on the PCI bus, no nvidia-smi, no topology."""
    return replace(capture_facts(folder), smi=NO_NVIDIA_SMI, topology=None)


def h200_profile(**gpus):
    """2x-pix with the H200 machine's own values: every hardware check should pass."""
    values = dict(model="H200", compute_capability="9.0", memory_mib=143771, bar1_mib=262144,
                  topology="NV", power_limit_w=700)
    return profile("2x-pix", **{**values, **gpus})


def test_h200_matches_a_profile_written_for_it() -> None:
    facts = capture_facts(H200)
    checks = [check(h200_profile(), facts) for check in (
        hardware.check_gpu_count, hardware.check_gpu_model, hardware.check_compute_capability,
        hardware.check_gpu_memory, hardware.check_bar1, hardware.check_pcie_gen, hardware.check_pcie_width,
        hardware.check_topology, hardware.check_persistence_mode, hardware.check_power_limit)]
    assert [(c.name, c.verdict) for c in checks if c.verdict != "ok"] == []
    assert checks[1].found == "2x NVIDIA H200"
    assert checks[7].found == "NV18 (slowest GPU pair)"


def test_gpu_count() -> None:
    facts = capture_facts(H200)
    assert hardware.check_gpu_count(profile("2x-pix"), facts).verdict == "ok"
    short = hardware.check_gpu_count(profile("4x-threadripper"), facts)
    assert (short.verdict, short.blocking, short.found) == ("fail", True, "2 (nvidia-smi)")
    extra = hardware.check_gpu_count(profile("2x-pix", count=1), facts)
    assert extra.verdict == "warn" and not extra.deploy_fixes
    # nvidia-smi sees one of the two GPUs on the bus (one fell off, or the wrong kernel module).
    one_seen = replace(facts, smi=replace(facts.smi, gpus=facts.smi.gpus[:1]))
    missing = hardware.check_gpu_count(profile("2x-pix"), one_seen)
    assert missing.verdict == "warn" and missing.deploy_fixes and "1 in nvidia-smi, 2 on the PCI bus" in missing.found
    fresh = hardware.check_gpu_count(profile("2x-pix"), before_driver())
    assert (fresh.verdict, fresh.found) == ("ok", "2 (PCI bus)")


def test_gpu_model() -> None:
    wrong = hardware.check_gpu_model(profile("2x-pix"), capture_facts(H200))
    assert (wrong.verdict, wrong.blocking) == ("fail", True)
    assert "2x NVIDIA H200, not RTX PRO 6000 Blackwell" in wrong.fix
    assert hardware.check_gpu_model(profile("2x-pix"), rtx_pro_6000_facts()).verdict == "ok"
    # Before the driver: named from the PCI id, and judged all the same.
    assert hardware.check_gpu_model(profile("2x-pix"), before_driver()).verdict == "fail"
    assert hardware.check_gpu_model(h200_profile(), before_driver()).verdict == "ok"
    fresh = before_driver()
    unknown = replace(fresh, pci=replace(fresh.pci, gpus=tuple(replace(g, device_id="10de:9999",
                                                                         name="NVIDIA Corporation Device 9999")
                                                                 for g in fresh.pci.gpus)))
    pending = hardware.check_gpu_model(profile("2x-pix"), unknown)
    assert pending.verdict == "warn" and pending.deploy_fixes and "10de:9999" in pending.fix


def test_compute_capability() -> None:
    wrong = hardware.check_compute_capability(profile("2x-pix"), capture_facts(H100))
    assert (wrong.verdict, wrong.blocking, wrong.found) == ("fail", True, "9.0")
    assert "sm_120" in wrong.fix
    assert hardware.check_compute_capability(profile("2x-pix"), rtx_pro_6000_facts()).verdict == "ok"
    pending = hardware.check_compute_capability(profile("2x-pix"), before_driver())
    assert pending.verdict == "warn" and pending.deploy_fixes and "unknown" in pending.found


def test_gpu_memory() -> None:
    assert hardware.check_gpu_memory(profile("2x-pix"), rtx_pro_6000_facts()).verdict == "ok"
    more = hardware.check_gpu_memory(profile("2x-pix"), capture_facts(H200))
    assert (more.verdict, more.deploy_fixes, more.found) == ("warn", False, "143771 MiB on all 2")
    less = hardware.check_gpu_memory(profile("2x-pix", memory_mib=143771), capture_facts(H100))
    assert (less.verdict, less.blocking, less.found) == ("fail", True, "81559 MiB")
    assert hardware.check_gpu_memory(profile("2x-pix"), before_driver()).deploy_fixes


def test_bar1() -> None:
    small = hardware.check_bar1(profile("2x-pix"), rtx_pro_6000_facts())
    assert (small.verdict, small.blocking) == ("fail", True)
    assert small.found == "GPU0 131072 MiB, GPU1 256 MiB"
    assert small.fix.startswith("BAR1 256 MiB: enable Resizable BAR and Above 4G decoding")
    assert hardware.check_bar1(profile("2x-pix"), capture_facts(H200)).verdict == "ok"
    # Before the driver the BAR comes from lspci's Region sizes.
    fresh = hardware.check_bar1(profile("2x-pix"), before_driver())
    assert (fresh.verdict, fresh.found) == ("ok", "262144 MiB on all 2")
    too_big = hardware.check_bar1(profile("2x-pix", bar1_mib=524288), before_driver())
    assert too_big.verdict == "fail"


def test_pcie_gen_and_width() -> None:
    facts = rtx_pro_6000_facts()
    # GPU1 idles at Gen1 but can reach Gen5: not a fault. It runs at x8: a fault.
    gen = hardware.check_pcie_gen(profile("2x-pix"), facts)
    assert (gen.verdict, gen.found) == ("ok", "GPU0 Gen5, GPU1 Gen5 (now Gen1)")
    width = hardware.check_pcie_width(profile("2x-pix"), facts)
    assert (width.verdict, width.blocking, width.found) == ("fail", True, "GPU0 x16, GPU1 x8")
    assert "GPU1 runs at x8: reseat it" in width.fix
    slow_slot = hardware.check_pcie_gen(profile("2x-pix", pcie_gen=6), capture_facts(H200))
    assert (slow_slot.verdict, slow_slot.blocking) == ("fail", True)
    assert hardware.check_pcie_width(profile("2x-pix"), capture_facts(H200)).verdict == "ok"
    # Before the driver: lspci LnkSta; an idle link below the profile's generation is only advice.
    fresh = before_driver()
    idle = replace(fresh, pci=replace(fresh.pci, gpus=tuple(replace(g, link_gen_now=1) for g in fresh.pci.gpus)))
    advice = hardware.check_pcie_gen(profile("2x-pix"), idle)
    assert advice.verdict == "warn" and not advice.deploy_fixes
    unread = tuple(replace(gpu, link_width_now=None) for gpu in fresh.pci.gpus)
    no_link = replace(fresh, pci=replace(fresh.pci, gpus=unread))
    assert hardware.check_pcie_width(profile("2x-pix"), no_link).deploy_fixes


def test_topology() -> None:
    facts = capture_facts(H200)
    better = hardware.check_topology(profile("2x-pix"), facts)
    assert (better.verdict, better.blocking) == ("warn", False)
    assert better.fix.startswith("topology NV18 is faster than the profile's PIX")
    assert hardware.check_topology(h200_profile(), facts).verdict == "ok"
    # The hand-written 4x NODE excerpt of rig-facts §3.1 against the 2x PIX profile: the example.
    node = (H200.parent / "topo-m-4gpu-excerpt-from-rig-facts-node.txt").read_text()
    from rigforge.facts.topology import parse_topology

    worse = hardware.check_topology(profile("2x-pix"), replace(facts, topology=parse_topology(node)))
    assert (worse.verdict, worse.blocking) == ("fail", True)
    assert worse.fix.startswith("topology NODE but profile expects PIX")
    pix = parse_topology((H200.parent / "topo-m-2gpu-excerpt-from-rig-facts-pix.txt").read_text())
    assert hardware.check_topology(profile("2x-pix"), replace(facts, topology=pix)).verdict == "ok"
    single = hardware.check_topology(profile("2x-pix"), capture_facts(H100))
    assert single.verdict == "warn" and "no pair" in single.found
    assert hardware.check_topology(profile("2x-pix"), before_driver()).deploy_fixes


def test_persistence_mode() -> None:
    off = hardware.check_persistence_mode(profile("2x-pix"), rtx_pro_6000_facts())
    assert (off.verdict, off.deploy_fixes, off.found) == ("warn", True, "GPU0 enabled, GPU1 disabled")
    assert hardware.check_persistence_mode(profile("2x-pix"), capture_facts(H200)).verdict == "ok"


def test_power_limit() -> None:
    low = hardware.check_power_limit(profile("2x-pix"), rtx_pro_6000_facts())
    assert (low.verdict, low.deploy_fixes, low.found) == ("warn", True, "GPU0 600 W, GPU1 300 W")
    h200 = hardware.check_power_limit(profile("2x-pix"), capture_facts(H200))
    assert (h200.verdict, h200.found) == ("warn", "700 W on all 2")
    # 900 W is outside what the H200 accepts (200-700 W): no deploy can set it.
    beyond = hardware.check_power_limit(profile("2x-pix", power_limit_w=900), capture_facts(H200))
    assert (beyond.verdict, beyond.blocking, beyond.found) == ("fail", True, "GPU0 accepts 200-700 W")
    assert hardware.check_power_limit(profile("2x-pix", power_limit_w=None), capture_facts(H200)).verdict == "ok"
    assert hardware.check_power_limit(h200_profile(), capture_facts(H200)).verdict == "ok"
