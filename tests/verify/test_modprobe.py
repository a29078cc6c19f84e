"""What the modprobe role promises: the modprobe.d files of the profile, and the options loaded.

The loaded-option checks need the NVIDIA modules, so they skip on hosts without GPUs.
"""

from __future__ import annotations

from rigforge.facts.driver import module_param_enabled, parse_driver_params, parse_registry_dwords
from rigforge.profile import Profile
from roles.modprobe import P2P_OVERRIDE_FILE, render_modprobe_files


def test_files_are_the_profiles(host, profile: Profile) -> None:
    for path, content in render_modprobe_files(profile).items():
        assert host.file(path).content_string == content, f"{path} differs from what the profile renders"


def test_force_p2p_only_where_the_profile_asks(host, profile: Profile) -> None:
    assert host.file(P2P_OVERRIDE_FILE).exists == profile.modprobe.force_p2p_override


def test_uvm_hmm_disabled_in_the_loaded_module(host, profile: Profile, needs_gpu: None) -> None:
    if "uvm_disable_hmm" not in profile.modprobe.options.get("nvidia_uvm", {}):
        return
    value = host.file("/sys/module/nvidia_uvm/parameters/uvm_disable_hmm").content_string
    assert module_param_enabled(value), f"uvm_disable_hmm is {value.strip()!r} in the loaded nvidia_uvm"


def test_registry_dwords_loaded_only_with_force_p2p(host, profile: Profile, needs_gpu: None) -> None:
    params = parse_driver_params(host.file("/proc/driver/nvidia/params").content_string)
    loaded = parse_registry_dwords(params.get("RegistryDwords", ""))
    if profile.modprobe.force_p2p_override:
        assert loaded == parse_registry_dwords(profile.modprobe.p2p_registry_dwords)
    else:
        assert "ForceP2P" not in loaded


def test_nouveau_not_loaded(host, profile: Profile) -> None:
    if "nouveau" in profile.modprobe.blacklist:
        assert not host.file("/sys/module/nouveau").exists
