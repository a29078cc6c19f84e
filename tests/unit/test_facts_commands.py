"""The facts' commands, run for real through pyinfra's @local connector.

Checks that every fact command exits 0 (pyinfra fails a host otherwise) on a host without GPUs,
and that the fixtures were captured with the commands the facts run today.
"""

from __future__ import annotations

import csv
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.facts import get_facts

from rigforge import facts
from rigforge.facts.gpu import parse_gpu_fact_output
from rigforge.facts.topology import parse_topology

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
CAPTURES = sorted(path for path in FIXTURES.iterdir() if (path / "manifest.tsv").exists())
ALL_FACTS = [getattr(facts, name) for name in facts.__all__ if name[0].isupper() and name != "NO_NVIDIA_SMI"]
ALL_FACTS = [fact for fact in ALL_FACTS if hasattr(fact, "command")]


def _manifest(capture: Path) -> dict[str, dict[str, str]]:
    with (capture / "manifest.tsv").open() as handle:
        return {row["file"]: row for row in csv.DictReader(handle, delimiter="\t")}


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_fact_fixtures_come_from_current_commands(capture: Path) -> None:
    fact_rows = {name: row for name, row in _manifest(capture).items() if name.startswith("fact-")}
    assert fact_rows, "capture has no fact-* outputs"
    for name, row in fact_rows.items():
        fact_class = getattr(facts, name.removeprefix("fact-").removesuffix(".txt"))
        assert row["command"] == fact_class().command(), f"{name} was captured with another command"
        assert row["rc"] == "0", f"{name}: fact command must exit 0"


@pytest.fixture
def local_state() -> Iterator[State]:
    """A pyinfra State connected to this machine through the real @local connector."""
    inventory = Inventory((["@local"], {}))
    state = State(inventory, Config())
    connect_all(state)
    yield state


def _get(state: State, fact: type) -> Any:
    (value,) = get_facts(state, fact).values()
    return value


def test_every_fact_runs_here_without_failing_the_host(local_state: State) -> None:
    for fact in ALL_FACTS:
        _get(local_state, fact)
    assert not local_state.failed_hosts


def test_absent_values_match_this_machine(local_state: State) -> None:
    has_smi = shutil.which("nvidia-smi") is not None
    has_driver = Path("/proc/driver/nvidia/version").exists()
    inventory = _get(local_state, facts.NvidiaGpus)
    assert inventory.smi_found is has_smi
    if not has_smi:
        assert inventory == facts.NO_NVIDIA_SMI
        assert _get(local_state, facts.NvidiaTopology) is None
    if not has_driver:
        assert _get(local_state, facts.NvidiaLoadedDriver) is None
        assert _get(local_state, facts.NvidiaDriverParams) is None
    if not Path("/sys/module/nvidia_uvm").exists():
        assert _get(local_state, facts.NvidiaUvmParams) is None
    if shutil.which("lspci") is None:
        assert _get(local_state, facts.PciAcs) is None
    cmdline = Path("/proc/cmdline").read_text()
    assert _get(local_state, facts.KernelCmdline) == facts.host.parse_cmdline(cmdline)
    nodes = _get(local_state, facts.NumaLayout)
    assert sum(len(node.cpus) for node in nodes) in (0, os.cpu_count())


# Stand-in for nvidia-smi (no NVIDIA driver can exist on this machine): it replays a real capture,
# so the fact's own command string, the shell and pyinfra's line handling all run for real.
STAND_IN = """#!/bin/sh
case "$*" in
  "-q -x") cat "{capture}/nvidia-smi-q-x.xml" ;;
  "--query-gpu=pci.bus_id,compute_cap --format=csv,noheader") cat "{capture}/nvidia-smi-query-compute-cap.csv" ;;
  "topo -m") cat "{capture}/nvidia-smi-topo-m.txt" ;;
  *) echo "stand-in nvidia-smi: unexpected arguments: $*" >&2; exit 2 ;;
esac
"""

FAILING_STAND_IN = """#!/bin/sh
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. \
Make sure that the latest NVIDIA driver is installed and running."
exit 9
"""


def _install_stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(script)
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda path: path.name)
def test_gpu_facts_through_pyinfra_on_replayed_capture(
    capture: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local_state: State
) -> None:
    _install_stand_in(tmp_path, monkeypatch, STAND_IN.format(capture=capture))
    inventory = _get(local_state, facts.NvidiaGpus)
    topology = _get(local_state, facts.NvidiaTopology)
    assert inventory == parse_gpu_fact_output((capture / "fact-NvidiaGpus.txt").read_text())
    assert inventory.present and all(gpu.compute_capability for gpu in inventory.gpus)
    assert topology == parse_topology((capture / "nvidia-smi-topo-m.txt").read_text())
    assert not local_state.failed_hosts


def test_failing_nvidia_smi_gives_error_not_failed_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local_state: State
) -> None:
    _install_stand_in(tmp_path, monkeypatch, FAILING_STAND_IN)
    inventory = _get(local_state, facts.NvidiaGpus)
    assert inventory.smi_found and not inventory.present
    assert inventory.error is not None and inventory.error.startswith("NVIDIA-SMI has failed")
    assert _get(local_state, facts.NvidiaTopology) is None
    assert not local_state.failed_hosts
