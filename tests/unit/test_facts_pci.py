"""PciAcs / parse_lspci_acs on the real lspci capture and the rig-facts ACS excerpt."""

from __future__ import annotations

from pathlib import Path

from rigforge.facts.pci import PciAcs, parse_lspci_acs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
ACS_EXCERPT = FIXTURES / "lspci-vvv-acs-excerpt-from-rig-facts.txt"


def test_real_flat_vm_bus_has_no_acs() -> None:
    text = (FIXTURES / "nvidia-h200-x2" / "lspci-vvv.txt").read_text()
    report = PciAcs().process(text.splitlines())
    assert report is not None
    assert report.ports == () and not report.config_space_hidden
    # The capture is a full -vvv listing (extended capabilities were readable as root).
    assert "Capabilities: [1b8 v2] Advanced Error Reporting" in text


def test_acs_excerpt() -> None:
    # Hand-written excerpt in lspci's layout with the ACS state rig-facts 1.7 describes.
    report = parse_lspci_acs(ACS_EXCERPT.read_text())
    assert [port.bdf for port in report.ports] == ["40:01.1", "42:00.0", "42:01.0"]
    root, downstream, cleared = report.ports
    assert root.description.startswith("PCI bridge: Advanced Micro Devices")
    assert (root.capability_offset, root.control_register) == (0x2A0, 0x2A6)
    assert (downstream.capability_offset, downstream.control_register) == (0x148, 0x14E)
    assert root.req_redir and root.cmplt_redir and root.capability["DirectTrans"]
    assert not root.control["DirectTrans"]
    assert not cleared.req_redir and not cleared.cmplt_redir and cleared.control["SrcValid"]
    assert report.redirecting == (root, downstream)
    assert not report.config_space_hidden


def test_access_denied_is_reported() -> None:
    # lspci -vvv run as non-root, in its real layout: extended capabilities are hidden.
    text = (
        "40:01.1 PCI bridge: Advanced Micro Devices, Inc. [AMD] Device 14ab (rev 01)\n"
        "\tControl: I/O- Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR+\n"
        "\tCapabilities: <access denied>\n"
        "\tKernel driver in use: pcieport\n"
    )
    report = parse_lspci_acs(text)
    assert report.ports == () and report.config_space_hidden


def test_domain_prefixed_addresses() -> None:
    text = (
        "0000:c0:01.1 PCI bridge: Advanced Micro Devices, Inc. [AMD] Device 14ab (rev 01)\n"
        "\tCapabilities: [2a0 v1] Access Control Services\n"
        "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans+\n"
        "\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-\n"
    )
    (port,) = parse_lspci_acs(text).ports
    assert port.bdf == "0000:c0:01.1" and not port.req_redir


def test_empty_and_absent() -> None:
    assert parse_lspci_acs("").ports == ()
    assert PciAcs.default() is None
    assert PciAcs().requires_command() == "lspci"
