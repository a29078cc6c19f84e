"""PCIe Access Control Services (ACS) state per port, from `lspci -vvv`.

ACS request/completion redirect on root ports and switch downstream ports sends GPU peer-to-peer
traffic up through the root complex, halving same-switch bandwidth on switch rigs. lspci prints
the capability as (pciutils ls-ecaps.c)::

    \tCapabilities: [2a0 v1] Access Control Services
    \t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans+
    \t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-

lspci needs root to read extended config space; without it each device shows
`Capabilities: <access denied>`, which this parser reports instead of claiming "no ACS".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyinfra.api import FactBase

_DEVICE_HEADER = re.compile(r"^((?:[0-9a-f]{4,8}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\s+(.*)$")
_ACS_HEADER = re.compile(r"^\s+Capabilities: \[([0-9a-f]+)(?: v\d+)?\] Access Control Services")
_ACS_REGISTER = re.compile(r"^\s+(ACSCap|ACSCtl):\s*(.*)$")
_FLAG = re.compile(r"(\w+)([+-])")

# The ACS Control register sits 6 bytes into the capability (header 4, capability register 2).
ACS_CONTROL_REGISTER_OFFSET = 6


@dataclass(frozen=True)
class AcsPort:
    """One PCI function that has an ACS capability.

    + bdf: address as lspci printed it (`40:01.1` or `0000:40:01.1`)
    + description: the rest of lspci's header line (`PCI bridge: ...`)
    + capability_offset: config-space offset of the ACS extended capability
    + capability / control: flag name -> set, from the ACSCap / ACSCtl lines
    """

    bdf: str
    description: str
    capability_offset: int
    capability: dict[str, bool]
    control: dict[str, bool]

    @property
    def req_redir(self) -> bool:
        """ACS P2P Request Redirect is on (peer requests go up to the root complex)."""
        return self.control.get("ReqRedir", False)

    @property
    def cmplt_redir(self) -> bool:
        """ACS P2P Completion Redirect is on."""
        return self.control.get("CmpltRedir", False)

    @property
    def control_register(self) -> int:
        """Config-space offset of the ACS Control word, as `setpci -s BDF OFFSET.w` needs it."""
        return self.capability_offset + ACS_CONTROL_REGISTER_OFFSET


@dataclass(frozen=True)
class AcsReport:
    """ACS state of every port that has the capability.

    `config_space_hidden` is True when lspci could not read extended config space (not root);
    then `ports` is incomplete and a check must not read "no redirect" from it.
    """

    ports: tuple[AcsPort, ...]
    config_space_hidden: bool

    @property
    def redirecting(self) -> tuple[AcsPort, ...]:
        """Ports with request or completion redirect on."""
        return tuple(port for port in self.ports if port.req_redir or port.cmplt_redir)


def _flags(text: str) -> dict[str, bool]:
    return {name: sign == "+" for name, sign in _FLAG.findall(text)}


def parse_lspci_acs(text: str) -> AcsReport:
    """Parse `lspci -vvv` output into the ACS state of each port that has the capability."""
    ports: list[AcsPort] = []
    hidden = False
    bdf = description = ""
    offset: int | None = None
    registers: dict[str, dict[str, bool]] = {}

    def close_capability() -> None:
        if offset is not None:
            ports.append(AcsPort(bdf, description, offset, registers.get("ACSCap", {}), registers.get("ACSCtl", {})))

    for line in text.splitlines():
        header = _DEVICE_HEADER.match(line)
        if header:
            close_capability()
            bdf, description, offset, registers = header.group(1), header.group(2), None, {}
            continue
        if "Capabilities: <access denied>" in line:
            hidden = True
            continue
        acs = _ACS_HEADER.match(line)
        if acs:
            close_capability()
            offset, registers = int(acs.group(1), 16), {}
            continue
        register = _ACS_REGISTER.match(line)
        if register and offset is not None:
            registers[register.group(1)] = _flags(register.group(2))
        elif line.lstrip().startswith("Capabilities:"):
            # The next capability ends the ACS block.
            close_capability()
            offset, registers = None, {}
    close_capability()
    return AcsReport(ports=tuple(ports), config_space_hidden=hidden)


class PciAcs(FactBase[AcsReport | None]):
    """
    Returns the ACS state of every PCI port that has the capability as an `AcsReport`, or None
    where lspci (Debian package `pciutils`) is missing. Run it as root: otherwise lspci hides
    extended config space and the report says so (`config_space_hidden`).

    .. code:: python

        report = host.get_fact(PciAcs)
        if report and report.redirecting:
            ...
    """

    def requires_command(self) -> str:
        return "lspci"

    def command(self) -> str:
        return "lspci -vvv 2>/dev/null || true"

    def process(self, output: list[str]) -> AcsReport | None:
        return parse_lspci_acs("\n".join(output))
