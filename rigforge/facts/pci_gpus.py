"""NVIDIA GPUs on the PCI bus from `lspci -vvv` and sysfs: found before any NVIDIA driver exists.

On a fresh rig nvidia-smi is absent, yet the hardware questions (how many GPUs, which model, BAR1
size, PCIe link) already have answers on the PCI bus. lspci names devices and shows LnkCap/LnkSta;
sysfs always exists (also where pciutils is not installed) and gives ids, link and BAR sizes. The
fact reads both and merges them per PCI address. Real layout (tests/fixtures/gpu/nvidia-h200-x2)::

    00:06.0 3D controller: NVIDIA Corporation Device 2335 (rev a1)
    \tRegion 2: Memory at 100000000000 (64-bit, prefetchable) [size=256G]
    \t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM L1, Exit Latency L1 <4us
    \t\tLnkSta:\tSpeed 32GT/s, Width x16
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyinfra.api import FactBase

from rigforge.reads.parsing import split_sections

_DEVICE_HEADER = re.compile(r"^((?:[0-9a-f]{4,8}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\s+(.*)$")

NVIDIA_VENDOR_ID = "10de"
SYSFS_SECTION = "sysfs"
# PCI class codes of display functions: VGA (0300), 3D controller (0302), other display (0380).
_GPU_CLASS_IDS = {"0300", "0302", "0380"}
_GPU_CLASS_NAMES = {"VGA compatible controller", "3D controller", "Display controller"}
# PCIe transfer rate (GT/s) -> generation.
_GEN_BY_SPEED = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

# Product names by PCI id, for hosts whose pci.ids predates the card (Debian 12's names neither the
# H200 nor the RTX PRO 6000) and for the time before nvidia-smi exists. Sources: 2330/2335 the
# pci_device_id of the real captures in tests/fixtures/gpu; 2bb1 and 2bb5 lspci's own names
# ("GB202GL [RTX PRO 6000 Blackwell Workstation/Server Edition]") in public rig logs; 2bb4 the Max-Q
# in public rig configs (one source swaps 2bb1/2bb4; all three are RTX PRO 6000 Blackwell).
KNOWN_GPUS: dict[str, str] = {
    "10de:2330": "NVIDIA H100 80GB HBM3",
    "10de:2335": "NVIDIA H200",
    "10de:2bb1": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
    "10de:2bb4": "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
    "10de:2bb5": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
}

_CLASS_AND_NAME = re.compile(r"^(?P<class>[^:\[]+?)(?: \[(?P<class_id>[0-9a-f]{4})\])?: (?P<name>.*)$")
_PCI_IDS = re.compile(r" \[(?P<vendor>[0-9a-f]{4}):(?P<device>[0-9a-f]{4})\]")
# lspci's words for an id its pci.ids lacks: `Device 2335`, or `Device` before ` [10de:2335]` with -nn.
_UNNAMED_DEVICE = re.compile(r"\bDevice(?: (?P<device>[0-9a-f]{4}))?$")
_REVISION = re.compile(r" \(rev [0-9a-f]+\)$")
_REGION = re.compile(r"^\s+Region \d+: Memory at .*\[size=(?P<size>\d+)(?P<unit>[KMGT]?)\]")
_LINK = re.compile(r"^\s+(?P<register>LnkCap|LnkSta):\s.*?Speed (?P<speed>[\d.]+)GT/s.*?Width x(?P<width>\d+)")
_SYSFS_LINE = re.compile(r"^/sys/bus/pci/devices/(?P<address>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])/"
                         r"(?P<file>\w+):(?P<value>.*)$")


@dataclass(frozen=True)
class PciGpu:
    """An NVIDIA display function on the PCI bus, as lspci or sysfs show it (no driver needed).

    + address: `0000:01:00.0`
    + device_id: `10de:2bb5`, or None where lspci printed a name but no ids
    + name: lspci's name (`NVIDIA Corporation GB202GL [...]`); `NVIDIA Corporation Device 2bb5` where
      nothing names the id
    + bar1_mib: the largest memory region, which is BAR1 (the framebuffer aperture); 256 = ReBAR off
    + link_gen_max / link_width_max: LnkCap, what the GPU can do
    + link_gen_now / link_width_now: LnkSta, the link right now (an idle GPU trains down its speed)
    """

    address: str
    device_id: str | None
    name: str
    bar1_mib: int | None
    link_gen_max: int | None
    link_width_max: int | None
    link_gen_now: int | None
    link_width_now: int | None

    @property
    def product(self) -> str:
        """The product name: from KNOWN_GPUS by PCI id, else lspci's name."""
        return KNOWN_GPUS.get(self.device_id or "", self.name)

    @property
    def identified(self) -> bool:
        """True when something names the product (KNOWN_GPUS or pci.ids), not just `Device 2335`."""
        return self.device_id in KNOWN_GPUS or not _UNNAMED_DEVICE.search(self.name)


@dataclass(frozen=True)
class PciGpuReport:
    """NVIDIA GPUs found on the PCI bus; `lspci_found` says whether names and link state came from lspci."""

    gpus: tuple[PciGpu, ...]
    lspci_found: bool


def pci_address(address: str) -> str:
    """`06:00.0` or `0000:06:00.0` -> `0000:06:00.0` (lspci leaves the domain out without -D)."""
    address = address.strip().lower()
    return address if address.count(":") == 2 else f"0000:{address}"


def link_generation(speed_gts: float | None) -> int | None:
    """PCIe generation of a transfer rate in GT/s (32 -> 5); None for an unknown rate."""
    return None if speed_gts is None else _GEN_BY_SPEED.get(round(speed_gts, 1))


def _header_gpu(address: str, description: str) -> dict | None:
    """Fields of an lspci header line when it names an NVIDIA display function, else None."""
    match = _CLASS_AND_NAME.match(description)
    if not match:
        return None
    is_display = match.group("class_id") in _GPU_CLASS_IDS or match.group("class") in _GPU_CLASS_NAMES
    name = _REVISION.sub("", match.group("name"))
    ids = _PCI_IDS.search(name)
    if ids:
        vendor, device = ids.group("vendor"), ids.group("device")
        name = _PCI_IDS.sub("", name)
        if name.endswith(" Device"):
            name = f"{name} {device}"  # the same words as without -nn
    else:
        vendor = NVIDIA_VENDOR_ID if name.startswith("NVIDIA") else None
        unnamed = _UNNAMED_DEVICE.search(name)
        device = unnamed.group("device") if unnamed and vendor else None
    if not is_display or vendor != NVIDIA_VENDOR_ID:
        return None
    return {"address": pci_address(address), "device_id": f"{vendor}:{device}" if device else None,
            "name": name, "bar1_mib": None, "link_gen_max": None, "link_width_max": None,
            "link_gen_now": None, "link_width_now": None}


def parse_lspci_gpus(text: str) -> tuple[PciGpu, ...]:
    """Parse `lspci -vvv` (with or without -D/-nn) into the NVIDIA GPUs it lists."""
    gpus: list[dict] = []
    current: dict | None = None
    for line in text.splitlines():
        header = _DEVICE_HEADER.match(line)
        if header:
            current = _header_gpu(header.group(1), header.group(2))
            if current is not None:
                gpus.append(current)
            continue
        if current is None:
            continue
        region = _REGION.match(line)
        if region:
            mib = int(region.group("size")) * _SIZE_UNITS[region.group("unit")] >> 20
            current["bar1_mib"] = max(current["bar1_mib"] or 0, mib)
        link = _LINK.match(line)
        if link:
            suffix = "max" if link.group("register") == "LnkCap" else "now"
            current[f"link_gen_{suffix}"] = link_generation(float(link.group("speed")))
            current[f"link_width_{suffix}"] = int(link.group("width"))
    return tuple(PciGpu(**fields) for fields in gpus)


def _sysfs_speed(value: str) -> int | None:
    """`32.0 GT/s PCIe` -> 5; `Unknown` -> None."""
    match = re.match(r"\s*([\d.]+) GT/s", value)
    return link_generation(float(match.group(1))) if match else None


def _sysfs_int(value: str) -> int | None:
    value = value.strip()
    return int(value) if value.isdigit() else None


def parse_sysfs_gpus(text: str) -> tuple[PciGpu, ...]:
    """Parse `grep -H ''` over NVIDIA functions' sysfs files (device, class, link, resource)."""
    files: dict[str, dict[str, list[str]]] = {}
    for line in text.splitlines():
        match = _SYSFS_LINE.match(line)
        if match:
            per_file = files.setdefault(match.group("address"), {})
            per_file.setdefault(match.group("file"), []).append(match.group("value"))
    gpus = []
    for address, values in sorted(files.items()):
        class_code = "".join(values.get("class", [""])).strip().removeprefix("0x")
        if class_code[:4] not in _GPU_CLASS_IDS:
            continue
        device = "".join(values.get("device", [""])).strip().removeprefix("0x")
        # resource: one "start end flags" line per BAR; unused BARs are all zeros.
        sizes = [int(end, 16) - int(start, 16) + 1 for start, end, _flags in
                 (line.split() for line in values.get("resource", []) if len(line.split()) == 3)
                 if int(start, 16)]
        device_id = f"{NVIDIA_VENDOR_ID}:{device}" if device else None
        gpus.append(PciGpu(
            address=address,
            device_id=device_id,
            # The words lspci prints for an id its pci.ids does not know.
            name=f"NVIDIA Corporation Device {device}",
            bar1_mib=max(sizes) >> 20 if sizes else None,
            link_gen_max=_sysfs_speed("".join(values.get("max_link_speed", [""]))),
            link_width_max=_sysfs_int("".join(values.get("max_link_width", [""]))),
            link_gen_now=_sysfs_speed("".join(values.get("current_link_speed", [""]))),
            link_width_now=_sysfs_int("".join(values.get("current_link_width", [""]))),
        ))
    return tuple(gpus)


def _merge(primary: PciGpu, fallback: PciGpu) -> PciGpu:
    """`primary` with its missing values taken from `fallback` (same function, other source)."""
    fields = {name: getattr(primary, name) for name in PciGpu.__dataclass_fields__}
    for name, value in fields.items():
        if value is None:
            fields[name] = getattr(fallback, name)
    return PciGpu(**fields)


def parse_pci_gpus(text: str) -> PciGpuReport:
    """Parse the `NvidiaPciGpus` fact output: lspci's listing (if any), then the sysfs section."""
    sections = split_sections(text)
    lspci_text = sections[""]
    from_lspci = {gpu.address: gpu for gpu in parse_lspci_gpus(lspci_text)}
    from_sysfs = {gpu.address: gpu for gpu in parse_sysfs_gpus(sections.get(SYSFS_SECTION, ""))}
    merged = [
        _merge(from_lspci[address], from_sysfs[address]) if address in from_lspci and address in from_sysfs
        else from_lspci.get(address) or from_sysfs[address]
        for address in sorted(set(from_lspci) | set(from_sysfs))
    ]
    return PciGpuReport(gpus=tuple(merged), lspci_found=bool(lspci_text.strip()))


class NvidiaPciGpus(FactBase[PciGpuReport]):
    """
    Returns the NVIDIA GPUs on the PCI bus as a `PciGpuReport`: PCI id, name, BAR1 size and PCIe
    link, read by lspci where it is installed and from sysfs always, so it works before any NVIDIA
    driver exists. No GPU gives an empty `gpus`.

    .. code:: python

        report = host.get_fact(NvidiaPciGpus)
        small_bar = [gpu.address for gpu in report.gpus if gpu.bar1_mib == 256]
    """

    def command(self) -> str:
        files = " ".join(f'"$d/{name}"' for name in ("device", "class", "max_link_speed", "max_link_width",
                                                      "current_link_speed", "current_link_width", "resource"))
        return (
            f"if command -v lspci >/dev/null 2>&1; then lspci -D -nn -vvv -d {NVIDIA_VENDOR_ID}: 2>/dev/null; fi; "
            f"echo '## {SYSFS_SECTION}'; for d in /sys/bus/pci/devices/*; do "
            f'[ "$(cat "$d/vendor" 2>/dev/null)" = 0x{NVIDIA_VENDOR_ID} ] && grep -H "" {files} 2>/dev/null; '
            "done; true"
        )

    @staticmethod
    def default() -> PciGpuReport:
        return PciGpuReport(gpus=(), lspci_found=False)

    def process(self, output: list[str]) -> PciGpuReport:
        return parse_pci_gpus("\n".join(output))
