"""Inventories: bad entries stop pyinfra while it loads the inventory — one line, no traceback, no connection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rigforge.inventory import rig_host

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("inventory", ["rig2x", "rig4x", "rig8x"])
def test_shipped_inventories_load(inventory: str) -> None:
    namespace: dict = {}
    exec((ROOT / "inventory" / f"{inventory}.py").read_text(), namespace)
    (name, data), = namespace[inventory]
    assert data["ssh_strict_host_key_checking"] == "yes"
    assert data["rigforge_profile"]["gpus"]["count"] in (2, 4, 8)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ssh_hostname": "rig; rm -rf /"}, "inventory host 'r': ssh_hostname 'rig; rm -rf /' is not a host name"),
        ({"ssh_port": 0}, "inventory host 'r': ssh_port 0 must be an integer 1-65535"),
        ({"ssh_port": "22"}, "inventory host 'r': ssh_port '22' must be an integer 1-65535"),
        ({"allow_reboots": False}, "inventory host 'r': unknown setting 'allow_reboots'; allowed: _sudo"),
        ({"profile": "2x-pixx"}, "inventory/profiles/2x-pixx.yaml: no such profile file"),
        ({"profile_overrides": {"gpus": {"count": 0}}},
         "inventory host 'r' profile_overrides: gpus.count: Input should be greater than or equal to 1"),
    ],
)
def test_bad_inventory_entry(kwargs: dict, message: str) -> None:
    args = {"profile": "2x-pix", "ssh_hostname": "10.0.0.5", **kwargs}
    with pytest.raises(SystemExit) as caught:
        rig_host("r", **args)
    assert message in str(caught.value.code)


def run_pyinfra(tmp_path: Path, inventory_text: str, *args: str) -> subprocess.CompletedProcess:
    inventory = tmp_path / "inv.py"
    inventory.write_text(inventory_text)
    return subprocess.run(
        [sys.executable, "-m", "pyinfra", str(inventory), "deploys/full.py", "--dry", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )


def test_pyinfra_stops_before_connecting_with_one_line(tmp_path: Path) -> None:
    # 192.0.2.0/24 is TEST-NET-1: never routed, so reaching "Connecting" would show in the output.
    result = run_pyinfra(
        tmp_path,
        "from rigforge.inventory import rig_host\n"
        "rigs = [rig_host('a', profile='2x-pix', ssh_hostname='192.0.2.1',"
        " profile_overrides={'engine': {'port': 'http'}})]\n",
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    assert "Connecting" not in result.stderr + result.stdout
    assert (
        "rigforge: inventory host 'a' profile_overrides: engine.port: Input should be a valid integer"
        in result.stderr
    )


def test_bad_cli_switch_stops_before_any_operation() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pyinfra", "@local", "deploys/full.py", "--dry", "--data", "allow_reboot=maybe"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    output = result.stdout + result.stderr
    assert "--data allow_reboot='maybe': expected true or false" in output
    assert "Traceback" not in output
    assert "Detected changes" not in output
