"""What the rendered host files must say, per profile, beyond matching their golden copies."""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rigforge.facts.pci import parse_lspci_acs
from rigforge.operations.nvidia_apt import RepoPlatform
from rigforge.profile.loader import ProfileError, load_profile
from rigforge.render import header_text
from roles import driver, modprobe, nccl, tuning
from roles.host import render_host_files
from roles.service import render_unit

PLATFORM = RepoPlatform("ubuntu2404", "x86_64")
RIGS = ("2x-pix", "4x-threadripper", "8x-turin")
ACS_EXCERPT = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "lspci-vvv-acs-excerpt-from-rig-facts.txt"


def _files(name: str, **overrides: object) -> dict[str, str]:
    return render_host_files(load_profile(name, overrides or None), PLATFORM)


@pytest.mark.parametrize("name", [*RIGS, "sandbox"])
def test_every_file_carries_the_managed_by_header(name: str) -> None:
    header = header_text(load_profile(name))
    for path, content in _files(name).items():
        lines = content.splitlines()
        # Executables keep their #! line first; the header is the comment right after it.
        first = lines[1] if lines[0].startswith("#!") else lines[0]
        assert header in first, f"{path}: first line lacks the managed-by header"


def test_sandbox_profile_writes_only_the_engine_environment() -> None:
    assert list(_files("sandbox")) == [nccl.ENGINE_ENV_FILE]


def test_force_p2p_only_on_the_node_rig() -> None:
    assert modprobe.P2P_OVERRIDE_FILE not in _files("2x-pix")
    assert modprobe.P2P_OVERRIDE_FILE not in _files("8x-turin")
    override = _files("4x-threadripper")[modprobe.P2P_OVERRIDE_FILE]
    assert ('options nvidia NVreg_RegistryDwords="ForceP2P=0x11;RMForceP2PType=1;RMPcieP2PType=2;'
            'GrdmaPciTopoCheckOverride=1;EnableResizableBar=1"') in override


@pytest.mark.parametrize("name", RIGS)
def test_uvm_hmm_off_and_nouveau_blacklisted_everywhere(name: str) -> None:
    files = _files(name)
    assert "options nvidia_uvm uvm_disable_hmm=1\n" in files[modprobe.options_file("nvidia_uvm")]
    assert "blacklist nouveau\n" in files[modprobe.BLACKLIST_FILE]


def test_kernel_parameters_per_rig() -> None:
    assert ' pci=noacs,realloc iommu=pt mitigations=off pcie_aspm=off pcie_port_pm=off"' in _files("2x-pix")[
        "/etc/default/grub.d/99-rigforge.cfg"]
    assert " amd_iommu=off iommu=off " in _files("8x-turin")["/etc/default/grub.d/99-rigforge.cfg"]


def test_graph_xml_only_on_8x_turin() -> None:
    for name in ("2x-pix", "4x-threadripper"):
        files = _files(name)
        assert "/etc/nccl_graph_opt.xml" not in files
        assert "NCCL_GRAPH_FILE" not in files[nccl.NCCL_CONF] + files[nccl.ENGINE_ENV_FILE]
    files = _files("8x-turin")
    # Every NCCL program on the rig reads nccl.conf, and NCCL fails any communicator the 8-GPU graph does not fit
    # (tests/fixtures/nccl/): the graph goes to the engine alone.
    assert "NCCL_GRAPH_FILE" not in files[nccl.NCCL_CONF]
    assert "NCCL_GRAPH_FILE=/etc/nccl_graph_opt.xml\n" in files[nccl.ENGINE_ENV_FILE]
    graphs = ET.fromstring(files["/etc/nccl_graph_opt.xml"])
    assert [(g.get("id"), g.get("pattern")) for g in graphs] == [("0", "4"), ("1", "1"), ("4", "6"), ("2", "3"),
                                                                ("3", "5")]
    rings = graphs[:2]
    for ring in rings:
        assert (ring.get("typeintra"), ring.get("typeinter"), ring.get("nchannels")) == ("PHB", "PIX", "2")
        assert [[gpu.get("dev") for gpu in channel] for channel in ring] == [list(nccl.GRAPH_GPUS)] * 2


def test_nccl_values_are_strings_as_nccl_reads_them() -> None:
    files = _files("4x-threadripper")
    assert "NCCL_P2P_LEVEL=SYS\n" in files[nccl.NCCL_CONF]
    env = files[nccl.ENGINE_ENV_FILE]
    assert env.endswith("NCCL_P2P_LEVEL=SYS\n")
    # The engine's own variables (its recipe's) are in its unit, not in nccl.conf or the env file.
    k64 = _files("4x-threadripper", engine={"recipe": "k64-tuned"})
    assert "VLLM_" not in k64[nccl.NCCL_CONF] and "VLLM_" not in k64[nccl.ENGINE_ENV_FILE]


def test_an_engine_variable_wins_over_the_rigs_nccl_env_for_the_engine_alone() -> None:
    """A recipe's NCCL_P2P_DISABLE (the published K=64 command's): docker run -e after --env-file, env file and
    nccl.conf unchanged; an env file value docker and systemd would read differently is refused."""
    profile = load_profile("4x-threadripper").with_recipe("k64-published")
    files = render_host_files(profile, PLATFORM)
    assert "NCCL_P2P_DISABLE" not in files[nccl.ENGINE_ENV_FILE] + files[nccl.NCCL_CONF]
    unit = render_unit(profile)
    assert unit.index("--env-file /etc/rigforge/engine.env") < unit.index("-e NCCL_P2P_DISABLE=1")
    with pytest.raises(ProfileError, match="NCCL_DEBUG='\"INFO\"': systemd and docker would read this value"):
        _files("2x-pix", nccl={"env": {"NCCL_DEBUG": '"INFO"'}})
    ok = _files("2x-pix", nccl={"env": {"NCCL_ALGO": "a b=c,d"}})[nccl.ENGINE_ENV_FILE]
    assert "NCCL_ALGO=a b=c,d\n" in ok


def test_repository_file_per_distro_and_arch() -> None:
    profile = load_profile("2x-pix")
    sources = driver.render_driver_files(profile, RepoPlatform("debian12", "sbsa"))[driver.SOURCES_FILE]
    assert "URIs: https://developer.download.nvidia.com/compute/cuda/repos/debian12/sbsa/\n" in sources
    assert "Suites: /\n" in sources and f"Signed-By: {driver.KEYRING}\n" in sources
    pin = driver.render_driver_files(profile, PLATFORM)[driver.PIN_FILE]
    assert "Pin: version 595.45.04-*\nPin-Priority: 1000\n" in pin


def test_gpu_settings_unit_follows_the_profile() -> None:
    unit = _files("2x-pix")[f"{tuning.UNIT_DIR}/{tuning.GPU_SETTINGS_UNIT}"]
    assert "ExecStart=/usr/bin/nvidia-smi -pm 1\nExecStart=/usr/bin/nvidia-smi -pl 600\n" in unit
    lower = _files("2x-pix", gpus={"power_limit_w": None, "persistence_mode": False})
    unit = lower[f"{tuning.UNIT_DIR}/{tuning.GPU_SETTINGS_UNIT}"]
    assert "-pm 0" in unit and "-pl" not in unit


def test_acs_unit_only_where_asked() -> None:
    assert tuning.ACS_SCRIPT not in _files("2x-pix")
    assert tuning.ACS_SCRIPT in _files("8x-turin")


def test_acs_script_clears_what_the_acs_fact_reports(tmp_path: Path) -> None:
    """Run the boot-time script with stand-in lspci/setpci (no PCI config writes here) on the ACS excerpt.

    The script's own parsing (awk at boot, no rigforge on the rig) must pick exactly the ports the
    PciAcs fact calls redirecting, at the control register offsets the fact computes.
    """
    excerpt = ACS_EXCERPT.read_text()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "setpci.calls"
    # Stand-ins: lspci prints the excerpt with domain-prefixed addresses (as -D does); setpci logs.
    domain_excerpt = "\n".join(f"0000:{line}" if line[:1].isalnum() else line for line in excerpt.splitlines())
    (bin_dir / "excerpt.txt").write_text(domain_excerpt + "\n")
    (bin_dir / "lspci").write_text(f"#!/bin/sh\ncat {bin_dir}/excerpt.txt\n")
    (bin_dir / "setpci").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    for tool in ("lspci", "setpci"):
        (bin_dir / tool).chmod(0o755)
    script = tmp_path / "disable-acs"
    script.write_text(_files("8x-turin")[tuning.ACS_SCRIPT])
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, check=False)

    expected = [f"-s 0000:{port.bdf} {port.control_register:x}.w=0x0011"
                for port in parse_lspci_acs(excerpt).redirecting]
    assert expected and calls.read_text().splitlines() == expected
    # The stand-in lspci still shows the redirects afterwards, so the script's own check fails loudly.
    assert result.returncode == 1 and "ACS redirect still on at 2 port(s)" in result.stderr


def test_engine_env_path_is_the_one_the_service_reads() -> None:
    engines = pytest.importorskip("rigforge.serving.engines")
    assert engines.ENGINE_ENV_FILE == nccl.ENGINE_ENV_FILE
