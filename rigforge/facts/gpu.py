"""GPU inventory from `nvidia-smi -q -x`, with compute capability from `--query-gpu`.

The XML report of driver 580 has no compute capability field (checked on H100 and H200 captures,
`tests/fixtures/gpu/`), so the fact runs `nvidia-smi --query-gpu=pci.bus_id,compute_cap` in the
same command, after a `## compute_cap` marker, and joins the two by PCI bus id.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

from pyinfra.api import FactBase

from rigforge.reads.parsing import first_number, split_sections

COMPUTE_CAP_SECTION = "compute_cap"


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi reports it. Numbers are None where nvidia-smi says `N/A`.

    PCIe `current` values are the link's state at the moment of reading: an idle GPU may train
    down to a lower generation, so compare `pcie_gen_max` (what the slot and card can do) for
    wiring and `pcie_gen_current` only under load.
    """

    index: int
    name: str
    bus_id: str
    uuid: str | None
    architecture: str | None
    compute_capability: str | None
    memory_total_mib: int | None
    bar1_total_mib: int | None
    pcie_gen_current: int | None
    pcie_gen_max: int | None
    pcie_width_current: int | None
    pcie_width_max: int | None
    persistence_mode: bool | None
    power_limit_enforced_w: float | None
    power_limit_default_w: float | None
    power_limit_min_w: float | None
    power_limit_max_w: float | None

    @property
    def pci_address(self) -> str:
        """The bus id in sysfs/lspci form: `00000000:18:00.0` -> `0000:18:00.0`."""
        return normalize_bus_id(self.bus_id)


@dataclass(frozen=True)
class GpuInventory:
    """All GPUs of a host plus the driver's versions.

    `smi_found` is False where nvidia-smi is not installed (no driver userspace); `error` holds
    nvidia-smi's own message where it ran but could not answer (e.g. kernel module not loaded).
    """

    smi_found: bool
    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[Gpu, ...]
    error: str | None = None

    @property
    def present(self) -> bool:
        """True when nvidia-smi answered and listed at least one GPU."""
        return bool(self.gpus)


NO_NVIDIA_SMI = GpuInventory(smi_found=False, driver_version=None, cuda_version=None, gpus=())


def normalize_bus_id(bus_id: str) -> str:
    """Bring a PCI address to the 4-digit-domain lower-case form sysfs and lspci -D use."""
    bus_id = bus_id.strip().lower()
    domain, sep, rest = bus_id.partition(":")
    if not sep or rest.count(":") != 1:
        return bus_id
    return f"{int(domain, 16):04x}:{rest}"


def parse_compute_caps(text: str) -> dict[str, str]:
    """Parse `--query-gpu=pci.bus_id,compute_cap --format=csv,noheader` into {pci_address: cap}.

    Lines that are not `bus_id, N.N` (an old driver's "not a valid field" message) are skipped.
    """
    caps: dict[str, str] = {}
    for line in text.splitlines():
        bus_id, sep, cap = (part.strip() for part in line.partition(","))
        if sep and first_number(cap) is not None:
            caps[normalize_bus_id(bus_id)] = cap
    return caps


def _text(element: ET.Element, path: str) -> str | None:
    """Text at `path`, or None where it is missing or `N/A`."""
    found = element.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return None if value in ("", "N/A") else value


def _int(element: ET.Element, path: str) -> int | None:
    number = first_number(_text(element, path))
    return None if number is None else int(number)


def _watts(element: ET.Element, *paths: str) -> float | None:
    """First power value found among `paths` (the XML renamed its power fields across drivers)."""
    for path in paths:
        number = first_number(_text(element, path))
        if number is not None:
            return number
    return None


def _enabled(element: ET.Element, path: str) -> bool | None:
    value = _text(element, path)
    return None if value is None else value.lower() == "enabled"


def _parse_gpu(index: int, node: ET.Element, caps: dict[str, str]) -> Gpu:
    bus_id = _text(node, "pci/pci_bus_id") or node.get("id", "")
    link = "pci/pci_gpu_link_info"
    # Driver >= 530 writes gpu_power_readings/current_power_limit; older ones power_readings/*.
    new, old = "gpu_power_readings", "power_readings"
    return Gpu(
        index=index,
        name=_text(node, "product_name") or "",
        bus_id=bus_id,
        uuid=_text(node, "uuid"),
        architecture=_text(node, "product_architecture"),
        compute_capability=caps.get(normalize_bus_id(bus_id)),
        memory_total_mib=_int(node, "fb_memory_usage/total"),
        bar1_total_mib=_int(node, "bar1_memory_usage/total"),
        pcie_gen_current=_int(node, f"{link}/pcie_gen/current_link_gen"),
        pcie_gen_max=_int(node, f"{link}/pcie_gen/max_link_gen"),
        pcie_width_current=_int(node, f"{link}/link_widths/current_link_width"),
        pcie_width_max=_int(node, f"{link}/link_widths/max_link_width"),
        persistence_mode=_enabled(node, "persistence_mode"),
        power_limit_enforced_w=_watts(node, f"{new}/current_power_limit", f"{old}/enforced_power_limit"),
        power_limit_default_w=_watts(node, f"{new}/default_power_limit", f"{old}/default_power_limit"),
        power_limit_min_w=_watts(node, f"{new}/min_power_limit", f"{old}/min_power_limit"),
        power_limit_max_w=_watts(node, f"{new}/max_power_limit", f"{old}/max_power_limit"),
    )


def _smi_failed(message: str) -> GpuInventory:
    return GpuInventory(smi_found=True, driver_version=None, cuda_version=None, gpus=(), error=message)


def parse_nvidia_smi_xml(xml_text: str, compute_caps: dict[str, str] | None = None) -> GpuInventory:
    """Parse `nvidia-smi -q -x` output. Never raises: unusable output becomes `error`.

    + xml_text: the XML report, or whatever nvidia-smi printed instead of it
    + compute_caps: {pci_address: "9.0"} from `parse_compute_caps`, joined by bus id
    """
    text = xml_text.strip()
    if not text:
        return _smi_failed("nvidia-smi printed nothing")
    if "<nvidia_smi_log" not in text:
        # nvidia-smi reports failures ("couldn't communicate with the NVIDIA driver") as plain text.
        return _smi_failed(next(line.strip() for line in text.splitlines() if line.strip()))
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        return _smi_failed(f"unreadable nvidia-smi XML: {exc}")
    caps = compute_caps or {}
    gpus = tuple(_parse_gpu(index, node, caps) for index, node in enumerate(root.findall("gpu")))
    return GpuInventory(
        smi_found=True,
        driver_version=_text(root, "driver_version"),
        cuda_version=_text(root, "cuda_version"),
        gpus=gpus,
    )


def parse_gpu_fact_output(text: str) -> GpuInventory:
    """Parse the whole output of the `NvidiaGpus` fact command (XML, marker, compute caps)."""
    sections = split_sections(text)
    caps = parse_compute_caps(sections.get(COMPUTE_CAP_SECTION, ""))
    return parse_nvidia_smi_xml(sections[""], caps)


class NvidiaGpus(FactBase[GpuInventory]):
    """
    Returns the host's NVIDIA GPUs and driver/CUDA versions as a `GpuInventory`.

    Hosts without nvidia-smi give `NO_NVIDIA_SMI` (smi_found=False, no GPUs); a driver that is
    installed but not loaded gives smi_found=True with nvidia-smi's message in `error`.

    .. code:: python

        inventory = host.get_fact(NvidiaGpus)
        bar1 = [gpu.bar1_total_mib for gpu in inventory.gpus]
    """

    def command(self) -> str:
        return (
            "if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -q -x; "
            f"echo '## {COMPUTE_CAP_SECTION}'; "
            "nvidia-smi --query-gpu=pci.bus_id,compute_cap --format=csv,noheader; fi; true"
        )

    @staticmethod
    def default() -> GpuInventory:
        return NO_NVIDIA_SMI

    def process(self, output: list[str]) -> GpuInventory:
        return parse_gpu_fact_output("\n".join(output))
