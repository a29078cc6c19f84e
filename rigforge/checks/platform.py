"""Driver, kernel and host checks: driver version, module options, ForceP2P, ACS, IOMMU, command line,
CPU governor and the model pin. Each compares what the running kernel has with the profile; most of
them are things the deploy changes, so they warn before a deploy and fail verification after one.
"""

from __future__ import annotations

import re

from rigforge.checks.model import Check, HostFacts, advice, deploy_fixes, failed, ok
from rigforge.facts import cmdline_has, module_param_enabled, parse_registry_dwords
from rigforge.facts.host import requested_iommu_mode
from rigforge.profile import Profile

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SWITCH_TOPOLOGIES = ("PIX", "PXB")
# Module options the kernel shows: nvidia_uvm in sysfs, nvidia's NVreg_* in /proc/driver/nvidia/params.
_CHECKABLE_MODULES = ("nvidia_uvm", "nvidia")


def check_driver(profile: Profile, facts: HostFacts) -> Check | None:
    """Driver version and flavor: the profile's, installed (nvidia-smi) and loaded (/proc/driver/nvidia/version)."""
    if profile.driver is None:
        return None
    wanted, flavor = profile.driver.version, profile.driver.flavor
    expected = f"{wanted} ({flavor})"
    loaded, smi = facts.loaded_driver, facts.smi
    if loaded is None and not smi.smi_found:
        return deploy_fixes("driver", expected, "not installed", "not installed yet: deploy installs it")
    if smi.error and "mismatch" in smi.error.lower():
        found = f"loaded {loaded.version if loaded else '?'}; nvidia-smi: {smi.error}"
        return deploy_fixes("driver", expected, found,
                            "installed and loaded driver differ: a reboot is pending; the deploy reboots into the "
                            "installed one (--data allow_reboot=true, the default)")
    if loaded is None:
        return deploy_fixes("driver", expected, f"installed {smi.driver_version or '?'}, not loaded",
                            "installed but not loaded: the deploy reboots to load it")
    loaded_flavor = "open" if loaded.open_kernel_module else "proprietary"
    found = f"loaded {loaded.version} ({loaded_flavor})"
    if smi.driver_version and smi.driver_version != loaded.version:
        found += f", installed {smi.driver_version}"
    if loaded.version != wanted or (smi.driver_version or wanted) != wanted:
        return deploy_fixes("driver", expected, found, f"deploy installs {wanted} and reboots to load it")
    if loaded_flavor != flavor:
        return deploy_fixes("driver", expected, found, f"deploy installs the {flavor} kernel modules")
    return ok("driver", expected, found)


def _loaded_options(module: str, facts: HostFacts) -> dict[str, str] | None:
    if module == "nvidia_uvm":
        return facts.uvm_params
    if facts.driver_params is None:
        return None
    return {f"NVreg_{name}": value for name, value in facts.driver_params.items()}


def _matches(wanted: int | str, value: str | None) -> bool:
    if isinstance(wanted, int) and wanted in (0, 1):
        return value is not None and module_param_enabled(value) == bool(wanted)
    return value is not None and value.strip() == str(wanted)


def check_module_options(profile: Profile, facts: HostFacts) -> Check | None:
    """Module options from modprobe.d as the loaded modules show them (uvm_disable_hmm=1 reads `Y`)."""
    options = {module: params for module, params in profile.modprobe.options.items()
               if module in _CHECKABLE_MODULES and params}
    if not options:
        return None
    expected = "; ".join(f"{module} " + " ".join(f"{k}={v}" for k, v in params.items())
                         for module, params in options.items())
    found_parts, wrong, not_loaded = [], [], []
    for module, params in options.items():
        loaded = _loaded_options(module, facts)
        if loaded is None:
            not_loaded.append(module)
            continue
        for name, wanted in params.items():
            value = loaded.get(name)
            found_parts.append(f"{name}={'absent' if value is None else value}")
            if not _matches(wanted, value):
                wrong.append(name)
    if not_loaded:
        found_parts.append(f"{', '.join(not_loaded)} not loaded")
    found = "; ".join(found_parts)
    if wrong or not_loaded:
        why = " (without uvm_disable_hmm=1 NCCL P2P locks up, rig-facts §1.4)" if "uvm_disable_hmm" in wrong else ""
        return deploy_fixes("module-options", expected, found,
                            f"{', '.join(wrong) or 'options'} not in effect{why}: the deploy writes "
                            "/etc/modprobe.d and reloads the modules or reboots")
    return ok("module-options", expected, found)


def check_force_p2p(profile: Profile, facts: HostFacts) -> Check | None:
    """The NVreg_RegistryDwords ForceP2P override: only on direct-attach (NODE) rigs (rig-facts §1.5)."""
    if profile.gpus is None:
        return None
    wanted = profile.modprobe.force_p2p_override
    expected = "present" if wanted else "absent"
    if facts.driver_params is None:
        return deploy_fixes("force-p2p", expected, "unknown (driver not loaded)",
                            "read from /proc/driver/nvidia/params once the driver is loaded")
    registry = facts.driver_params.get("RegistryDwords", "")
    present = "ForceP2P" in parse_registry_dwords(registry)
    found = f"present ({registry})" if present else "absent"
    if present == wanted:
        return ok("force-p2p", expected, found)
    if wanted:
        return deploy_fixes("force-p2p", expected, found,
                            "the deploy writes the ForceP2P override and reloads nvidia (NODE rigs, rig-facts §1.5)")
    return failed("force-p2p", expected, found,
                  f"ForceP2P override present on a {profile.gpus.topology} rig: remove it from /etc/modprobe.d and "
                  "reload nvidia (it breaks custom all-reduce behind a switch, rig-facts §1.5)", blocking=False)


def _profile_clears_acs(profile: Profile) -> str | None:
    """How the profile clears ACS redirect at boot, if it does."""
    if profile.tuning.disable_acs:
        return "the setpci script at every boot (tuning.disable_acs)"
    if cmdline_has(tuple(profile.boot.kernel_params), "pci=noacs"):
        return "pci=noacs on the kernel command line"
    return None


def check_acs(profile: Profile, facts: HostFacts) -> Check | None:
    """ACS request/completion redirect on bridges of a switch rig halves same-switch P2P (rig-facts §1.7)."""
    if profile.gpus is None or profile.gpus.topology not in _SWITCH_TOPOLOGIES:
        return None
    expected = "no ACS redirect on bridges"
    if facts.acs is None:
        return deploy_fixes("acs", expected, "unknown (lspci missing)", "the base role installs pciutils (lspci)")
    if facts.acs.config_space_hidden:
        return advice("acs", expected, "unknown (config space hidden)", "run as root so lspci can read ACS")
    redirecting = facts.acs.redirecting
    if not redirecting:
        return ok("acs", expected, f"none of {len(facts.acs.ports)} ports with ACS redirect")
    found = f"redirect on {len(redirecting)} ports ({', '.join(port.bdf for port in redirecting[:4])})"
    mechanism = _profile_clears_acs(profile)
    if mechanism:
        return deploy_fixes("acs", expected, found, f"the deploy clears it with {mechanism}; applies after reboot")
    return failed("acs", expected, found,
                  "P2P between GPUs goes up through the root complex at half speed: set tuning.disable_acs or "
                  "boot with pci=noacs", blocking=False)


def _param_present(tokens: tuple[str, ...], param: str) -> bool:
    """`pci=noacs,realloc` is present when every comma value is set, in one token or several."""
    key, sep, values = param.partition("=")
    if not sep:
        return cmdline_has(tokens, param)
    return all(cmdline_has(tokens, f"{key}={value}") for value in values.split(","))


def check_kernel_cmdline(profile: Profile, facts: HostFacts) -> Check:
    """The profile's kernel parameters in the running kernel's /proc/cmdline."""
    wanted = profile.boot.kernel_params
    if not wanted:
        return ok("kernel-cmdline", "no parameters", "-")
    missing = [param for param in wanted if not _param_present(facts.cmdline, param)]
    if missing:
        return deploy_fixes("kernel-cmdline", " ".join(wanted), f"missing {' '.join(missing)}",
                            "the deploy adds them to GRUB; they take effect after the reboot")
    return ok("kernel-cmdline", " ".join(wanted), "all present")


def check_iommu(profile: Profile, facts: HostFacts) -> Check:
    """The IOMMU must not translate GPU DMA: -15 % P2P and NCCL hangs otherwise (rig-facts §1.4, §9 #2)."""
    requested = requested_iommu_mode(tuple(profile.boot.kernel_params))
    expected = {"passthrough": "passthrough (iommu=pt)", "off": "off"}.get(requested or "", "not translating")
    iommu = facts.iommu
    found = f"{iommu.mode} ({iommu.group_count} groups)"
    if iommu.mode in ("off", "passthrough"):
        return ok("iommu", expected, found)
    if iommu.mode == "unknown":
        return advice("iommu", expected, found, "IOMMU groups without a readable type: check dmesg for DMAR/AMD-Vi")
    if requested in ("passthrough", "off"):
        return deploy_fixes("iommu", expected, found, "the deploy boots with the profile's IOMMU parameter")
    return advice("iommu", expected, found,
                  "the IOMMU translates GPU DMA: boot with iommu=pt (or off), or set NCCL_P2P_DISABLE=1 "
                  "(rig-facts §1.4, §3.1)")


def check_cpu_governor(profile: Profile, facts: HostFacts) -> Check:
    """CPU frequency governor on every CPU (performance: +5 % at C=1, rig-facts §2.2)."""
    wanted = profile.tuning.cpu_governor
    if wanted is None:
        return ok("cpu-governor", "not managed", "-")
    if facts.governors is None:
        return advice("cpu-governor", wanted, "no cpufreq",
                      "this host exposes no cpufreq (a VM, or the BIOS owns CPU frequency): nothing to set")
    others = sorted({governor for governor in facts.governors.values() if governor != wanted})
    found = ", ".join(f"{governor} on {sum(g == governor for g in facts.governors.values())} CPUs"
                      for governor in sorted(set(facts.governors.values())))
    if others:
        return deploy_fixes("cpu-governor", wanted, found, f"the deploy pins {wanted} at every boot")
    return ok("cpu-governor", wanted, found)


def check_model_revision(profile: Profile, facts: HostFacts) -> Check:
    """A Hugging Face model pinned to a commit, so a re-run cannot fetch other weights."""
    model = profile.model
    if model.source != "huggingface":
        count = len(model.files)
        return ok("model-revision", "files pinned by sha256", f"{count} file{'s' if count != 1 else ''} with sha256")
    revision = model.revision or ""
    if _COMMIT.match(revision):
        return ok("model-revision", "a commit hash", revision)
    return advice("model-revision", "a commit hash", f"{revision!r} (a branch or tag)",
                  f"model revision {revision!r} is not pinned: set model.revision to the commit you verified")


MODULE_CHECK = "kernel-module"


def module_fix(kernels: list[str]) -> str:
    """The commands that give ``kernels`` their nvidia module (DKMS builds it once the headers are there)."""
    return "; ".join(f"apt-get install linux-headers-{kernel} && dkms autoinstall -k {kernel}" for kernel in kernels)


def check_kernel_module(profile: Profile, facts: HostFacts) -> Check | None:
    """The nvidia module at the profile's driver version for the running kernel and the one GRUB boots next."""
    kernels = facts.kernel_modules
    if profile.driver is None or kernels is None:
        return None
    wanted = profile.driver.version
    needed = kernels.kernels_needing_module()
    expected = f"nvidia {wanted} for {' and '.join(needed) or 'the kernel the host boots'}"
    found = "; ".join(kernels.describe(kernel) for kernel in needed) or "no kernel of the host's own"
    missing = kernels.missing(wanted)
    if not missing:
        return ok(MODULE_CHECK, expected, found)
    if not any(kernels.modules.values()) and facts.loaded_driver is None and not facts.smi.smi_found:
        return deploy_fixes(MODULE_CHECK, expected, found, "no driver yet: the deploy installs it and DKMS builds "
                                                           "the module")
    return deploy_fixes(MODULE_CHECK, expected, found,
                        f"{module_fix(missing)} (deploys/host.py does this; without it that kernel boots without GPUs)")
