"""Host facts for the check tests, built from the real captures in tests/fixtures (no host needed)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from rigforge.checks import HostFacts
from rigforge.checks.capture import read_capture
from rigforge.facts.gpu import parse_gpu_fact_output
from rigforge.profile import Profile
from rigforge.profile.loader import load_profile

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GPU_CAPTURES = FIXTURES / "gpu"
DEVICE_RUN = FIXTURES / "device-run"
H100 = GPU_CAPTURES / "nvidia-h100-x1"
H200 = GPU_CAPTURES / "nvidia-h200-x2"
RTX_PRO_6000_EXCERPT = GPU_CAPTURES / "nvidia-gpus-fact-excerpt-from-rig-facts-rtx-pro-6000.txt"

#: The GPU captures saved some facts' commands under the plain command's name (same output).
GPU_CAPTURE_ALIASES = {
    "NvidiaLoadedDriver": "proc-driver-nvidia-version.txt",
    "NvidiaDriverParams": "proc-driver-nvidia-params.txt",
    "KernelCmdline": "proc-cmdline.txt",
    "PciAcs": "lspci-vvv.txt",
    "NvidiaPciGpus": "lspci-vvv.txt",
    "NvidiaSmiVersions": "nvidia-smi-version.txt",
}


def capture_facts(folder: Path) -> HostFacts:
    """HostFacts of a real capture folder (tests/fixtures/gpu/<kind> or device-run/facts)."""
    return read_capture(folder, GPU_CAPTURE_ALIASES if folder.parent == GPU_CAPTURES else None)


def empty_facts() -> HostFacts:
    """A host with nothing: no GPU, no driver, no lspci, an empty command line (every fact's default)."""
    return read_capture(Path("/nonexistent"))


def rtx_pro_6000_facts() -> HostFacts:
    """The H200 host's kernel-side facts with the hand-written RTX PRO 6000 nvidia-smi excerpt (GPU1 misconfigured)."""
    return replace(capture_facts(H200), smi=parse_gpu_fact_output(RTX_PRO_6000_EXCERPT.read_text()))


def profile(name: str = "2x-pix", **gpus: Any) -> Profile:
    """A profile, with `gpus` fields replaced (model_copy: no validation, as a test wants)."""
    loaded = load_profile(name)
    if not gpus:
        return loaded
    assert loaded.gpus is not None
    return loaded.model_copy(update={"gpus": loaded.gpus.model_copy(update=gpus)})


def with_profile(base: Profile, **sections: Any) -> Profile:
    """`base` with whole sections replaced or updated: with_profile(p, modprobe={"force_p2p_override": True})."""
    update = {}
    for section, value in sections.items():
        current = getattr(base, section)
        update[section] = current.model_copy(update=value) if isinstance(value, dict) and current else value
    return base.model_copy(update=update)
