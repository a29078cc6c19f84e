"""The host-free parts of the STAND-IN .run installer (tests/standins/nvidia_runfile.py): its checksum, the
record the controller writes and the stand-in uninstaller reads, and the stand-in module's ELF.

The install and uninstall themselves need a sandbox host (they write /usr/bin, /lib/modules, /var/lib/nvidia).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.standins.kernels import module_elf
from tests.standins.nvidia_runfile import RUNFILE_VERSION, _installer_script, _record, nvidia_crc, record_version


def test_checksum_is_nvidia_installers_crc() -> None:
    # crc.c's CRC (polynomial 0x04C11DB7, MSB first, start ~0, no final xor) is CRC-32/MPEG-2, whose
    # published check value for "123456789" is 0x0376E6E7; an empty file is 0 (compute_crc).
    assert nvidia_crc(b"123456789") == 0x0376E6E7
    assert nvidia_crc(b"") == 0


def test_record_version_line_is_the_backwards_compatible_one() -> None:
    assert record_version("580.95.05") == "1.0-5809505 (580.95.05)"


def _host_functions() -> dict:
    """The stand-in nvidia-installer's functions, without running its main."""
    script = _installer_script(RUNFILE_VERSION).replace("sys.exit(main(sys.argv[1:]))", "")
    namespace: dict = {}
    exec(compile(script, "nvidia-installer", "exec"), namespace)  # our own generated script
    return namespace


def test_the_uninstaller_reads_the_record_the_install_writes(tmp_path: Path) -> None:
    kept, changed = tmp_path / "libcuda.so.580.95.05", tmp_path / "nvidia-smi"
    files = {str(kept): (b"library", 0o755), str(changed): (b"smi", 0o755)}
    links = {str(tmp_path / "libcuda.so.1"): "libcuda.so.580.95.05"}
    record = tmp_path / "log"
    record.write_text(_record(RUNFILE_VERSION, "x86_64", files, links))
    kept.write_bytes(b"library")
    changed.write_bytes(b"edited by hand")
    (tmp_path / "libcuda.so.1").symlink_to("libcuda.so.580.95.05")

    host = _host_functions()
    host["RECORD"] = str(record)
    version_line, description, entries = host["read_record"]()
    assert version_line == "1.0-5809505 (580.95.05)"
    assert description == "NVIDIA Accelerated Graphics Driver for Linux-x86_64"
    assert [(number, path) for number, path, _ in entries] == [(1, str(kept)), (1, str(changed)),
                                                               (0, str(tmp_path / "libcuda.so.1"))]
    notes: list[str] = []
    assert [host["unchanged"](*entry, notes.append) for entry in entries] == [True, False, True]
    assert notes == [f"The installed file '{changed}' has a different checksum than when it was installed."]


def test_module_elf_carries_the_version_and_licence(tmp_path: Path) -> None:
    module = tmp_path / "nvidia.ko"
    module.write_bytes(module_elf(RUNFILE_VERSION, "6.1.0-99-amd64", os.uname().machine))
    modinfo = shutil.which("modinfo") or shutil.which("modinfo", path="/usr/sbin:/sbin")
    if modinfo:
        read = subprocess.run([modinfo, "-F", "version", str(module)], capture_output=True, text=True, check=True)
        assert read.stdout.strip() == RUNFILE_VERSION
    elif shutil.which("readelf"):
        read = subprocess.run(["readelf", "-p", ".modinfo", str(module)], capture_output=True, text=True, check=True)
        assert f"version={RUNFILE_VERSION}" in read.stdout and "license=Dual MIT/GPL" in read.stdout
    else:
        pytest.skip("neither modinfo nor readelf is installed")
