"""The loaded NVIDIA kernel driver: its version and the parameters it was loaded with.

These read what the running kernel has, not what is installed or configured on disk: after a
package upgrade or a modprobe.d change they keep the old values until the modules reload.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyinfra.api import FactBase

from rigforge.reads.parsing import parse_grep_h

UVM_PARAMETERS_DIR = "/sys/module/nvidia_uvm/parameters"

_VERSION_LINE = re.compile(r"NVRM version:.*?Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class LoadedDriver:
    """The nvidia kernel module in memory.

    + version: e.g. `580.159.04`
    + open_kernel_module: True for the open GPU kernel modules (`nvidia-open`), False for the
      proprietary ones
    """

    version: str
    open_kernel_module: bool


def parse_driver_version(text: str) -> LoadedDriver | None:
    """Parse /proc/driver/nvidia/version; None when the file is empty or unrecognised."""
    for line in text.splitlines():
        match = _VERSION_LINE.search(line)
        if match:
            return LoadedDriver(version=match.group(1), open_kernel_module="Open Kernel Module" in line)
    return None


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def parse_driver_params(text: str) -> dict[str, str]:
    """Parse /proc/driver/nvidia/params (`Name: value` lines) into {name: value}, quotes removed.

    >>> parse_driver_params('EnableResizableBar: 1\\nRegistryDwords: "ForceP2P=0x11"')
    {'EnableResizableBar': '1', 'RegistryDwords': 'ForceP2P=0x11'}
    """
    params: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip():
            params[name.strip()] = _unquote(value.strip())
    return params


def parse_registry_dwords(value: str) -> dict[str, str]:
    """Split an NVreg_RegistryDwords string (`ForceP2P=0x11;RMForceP2PType=1`) into a dict."""
    entries: dict[str, str] = {}
    for entry in value.split(";"):
        name, sep, setting = entry.partition("=")
        if sep and name.strip():
            entries[name.strip()] = setting.strip()
    return entries


def parse_module_params(text: str) -> dict[str, str]:
    """Parse `grep -H '' /sys/module/MOD/parameters/*` into {parameter: value}."""
    return {path.rsplit("/", 1)[-1]: value for path, value in parse_grep_h(text).items()}


def module_param_enabled(value: str | None) -> bool:
    """Read a module parameter as a switch: bool params show `Y`/`N`, int ones `1`/`0`.

    `uvm_disable_hmm=1` in modprobe.d shows as `Y` in sysfs, so checks should compare with this
    rather than with the string they wrote.
    """
    return value is not None and value.strip().upper() in ("Y", "1", "YES", "ON", "TRUE")


class NvidiaLoadedDriver(FactBase[LoadedDriver | None]):
    """
    Returns the loaded nvidia kernel module as a `LoadedDriver`, or None when it is not loaded.

    .. code:: python

        driver = host.get_fact(NvidiaLoadedDriver)
        if driver and driver.version != "595.58.03":
            ...
    """

    def command(self) -> str:
        return "cat /proc/driver/nvidia/version 2>/dev/null || true"

    def process(self, output: list[str]) -> LoadedDriver | None:
        return parse_driver_version("\n".join(output))


class NvidiaDriverParams(FactBase[dict[str, str] | None]):
    """
    Returns /proc/driver/nvidia/params as {name: value} (quotes removed), or None when the
    nvidia module is not loaded. `parse_registry_dwords(params["RegistryDwords"])` splits the
    registry string.

    .. code:: python

        params = host.get_fact(NvidiaDriverParams)
        rebar = params is not None and params.get("EnableResizableBar") == "1"
    """

    def command(self) -> str:
        return "cat /proc/driver/nvidia/params 2>/dev/null || true"

    def process(self, output: list[str]) -> dict[str, str] | None:
        return parse_driver_params("\n".join(output)) or None


class NvidiaUvmParams(FactBase[dict[str, str] | None]):
    """
    Returns the nvidia_uvm module's parameters as {name: value}, or None when it is not loaded.
    Values are sysfs text: booleans read `Y`/`N` (see `module_param_enabled`).

    .. code:: python

        uvm = host.get_fact(NvidiaUvmParams)
        hmm_off = uvm is not None and module_param_enabled(uvm.get("uvm_disable_hmm"))
    """

    def command(self) -> str:
        return f"grep -H '' {UVM_PARAMETERS_DIR}/* 2>/dev/null; true"

    def process(self, output: list[str]) -> dict[str, str] | None:
        return parse_module_params("\n".join(output)) or None
