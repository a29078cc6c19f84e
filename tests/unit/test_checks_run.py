"""Running all checks: the GPU gate, the table, the summary, and facts read three ways (captures,
pyinfra's @local connector on this machine, a saved capture folder)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rigforge.checks import (
    CHECK_NAMES,
    NO_GPU,
    blocking_failures,
    gather_facts,
    run_checks,
    summary,
    table_lines,
)
from rigforge.checks.capture import main as capture_main
from rigforge.checks.capture import read_capture, save_capture
from rigforge.profile.loader import load_profile
from tests.support_checks import H100, H200, capture_facts, empty_facts, profile, rtx_pro_6000_facts

PROFILES = ["2x-pix", "4x-threadripper", "8x-turin", "sandbox"]
NO_NVIDIA_HERE = shutil.which("nvidia-smi") is None and not Path("/proc/driver/nvidia").exists()


def _verdicts(checks):
    return {check.name: check.verdict for check in checks}


@pytest.mark.parametrize("name", PROFILES)
@pytest.mark.parametrize("folder", [H100, H200], ids=lambda path: path.name)
def test_every_check_name_is_listed_and_unique(name: str, folder: Path) -> None:
    names = [check.name for check in run_checks(load_profile(name), capture_facts(folder))]
    assert len(names) == len(set(names))
    assert set(names) <= set(CHECK_NAMES)
    assert names == [known for known in CHECK_NAMES if known in names], "table order follows CHECK_NAMES"


def test_gpu_profile_on_a_host_without_gpus_gives_exactly_one_fail() -> None:
    checks = run_checks(profile("2x-pix"), empty_facts())
    fails = [check for check in checks if check.verdict == "fail"]
    assert [(check.name, check.found, check.blocking) for check in fails] == [("gpus", NO_GPU, True)]
    assert fails[0].fix.startswith(NO_GPU)
    # No GPU check runs on such a host; the host checks still do.
    assert [check.name for check in checks] == ["gpus", "kernel-cmdline", "iommu", "cpu-governor", "model-revision",
                                           "known-failures"]


def test_profile_without_gpus_passes() -> None:
    checks = run_checks(profile("sandbox"), empty_facts())
    assert "fail" not in _verdicts(checks).values()
    assert all(check.holds_after_deploy for check in checks)
    assert checks[0].expected == "none (profile without gpus)"
    # GPUs on the host are not the sandbox profile's business.
    on_gpu_host = run_checks(profile("sandbox"), capture_facts(H200))
    assert not blocking_failures(on_gpu_host) and on_gpu_host[0].found == "2 NVIDIA GPUs"


def test_blocking_failures_and_summary() -> None:
    checks = run_checks(profile("2x-pix"), rtx_pro_6000_facts())
    assert [check.name for check in blocking_failures(checks)] == ["bar1", "pcie-width"]
    text = summary("rig2x-a", checks)
    assert text.startswith("preflight rig2x-a: ") and text.endswith("(2 blocking: bar1, pcie-width)")
    assert "blocking" not in summary("sandbox-1", run_checks(profile("sandbox"), empty_facts()))


def test_table_has_one_header_and_wrapped_rows() -> None:
    checks = run_checks(profile("2x-pix"), rtx_pro_6000_facts())
    lines = table_lines(checks)
    assert [cell.strip() for cell in lines[0].split("|")] == ["check", "expected", "found", "verdict", "fix"]
    assert set(lines[1]) <= {"-", "+"}
    bar1 = next(line for line in lines if line.startswith("bar1 "))
    assert [cell.strip() for cell in bar1.split(" | ")][2:4] == ["GPU0 131072 MiB, GPU1 256 MiB", "fail (blocking)"]
    assert all(line == line.rstrip() for line in lines)
    # One first line per check (its name in column one); wrapped text continues on lines with an empty name.
    assert [line.split(" | ")[0].strip() for line in lines[2:] if not line.startswith(" ")] == [c.name for c in checks]


def test_saved_capture_reads_back_the_same(tmp_path: Path) -> None:
    written = save_capture(tmp_path)
    assert sorted(path.name for path in written) == sorted(path.name for path in tmp_path.iterdir())
    facts = read_capture(tmp_path)
    assert run_checks(profile("sandbox"), facts)[0].name == "gpus"
    assert capture_main(["show", str(tmp_path), "sandbox"]) == 0
    assert capture_main(["nonsense"]) == 2


@pytest.mark.skipif(not NO_NVIDIA_HERE, reason="this machine has an NVIDIA driver")
def test_facts_through_pyinfra_on_this_machine_without_gpus() -> None:
    from pyinfra.api import Config, Inventory, State
    from pyinfra.api.connect import connect_all
    from pyinfra.api.facts import get_facts

    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)

    def get_fact(fact: type):
        (value,) = get_facts(state, fact).values()
        return value

    checks = run_checks(profile("2x-pix"), gather_facts(get_fact))
    assert [check.name for check in checks if check.verdict == "fail"] == ["gpus"]
    assert not state.failed_hosts
