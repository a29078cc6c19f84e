"""The committed run on the lent 2x H200 machine (tests/fixtures/device-run) names every difference
from the 2x-pix profile, crashed on nothing, and agrees with the checks re-run on its own facts."""

from __future__ import annotations

import re

import pytest

from rigforge.checks import run_checks
from tests.support_checks import DEVICE_RUN, capture_facts, profile

#: check -> (verdict as the table prints it, words the found cell starts with)
DIFFERENCES = {
    "gpu-model": ("fail (blocking)", "2x NVIDIA H200"),
    "compute-capability": ("fail (blocking)", "9.0 on all 2"),
    "gpu-memory": ("warn", "143771 MiB on all 2"),
    "topology": ("warn", "NV18"),
    "power-limit": ("warn", "700 W on all 2"),
    "driver": ("warn", "loaded 580.159.04 (open)"),
    "module-options": ("warn", "uvm_disable_hmm=N"),
    "kernel-cmdline": ("warn", "missing pci=noacs,realloc iommu=pt"),
    "cpu-governor": ("warn", "no cpufreq"),
    "model-revision": ("warn", "'main' (a branch or tag)"),
}
#: What must not remain after a deploy: the verify suite fails exactly these.
VERIFY_FAILURES = ["gpu-model", "compute-capability", "power-limit", "driver", "module-options", "kernel-cmdline"]
OUTPUTS = ["preflight.txt", "preflight-dry.txt", "verify.txt", "preflight-probe.txt", "probe.log", "machine.txt"]


def _table_rows(text: str) -> dict[str, list[str]]:
    """First line of each check row in a logged table: name -> cells."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"^\s+\[@local\] ([a-z0-9-]+)\s+\| (.*)$", line)
        if match and match.group(1) != "check":
            rows[match.group(1)] = [cell.strip() for cell in match.group(2).split(" | ")]
    return rows


@pytest.mark.parametrize("output", OUTPUTS)
def test_nothing_crashed(output: str) -> None:
    assert "Traceback" not in (DEVICE_RUN / output).read_text()


def test_preflight_names_each_difference() -> None:
    text = (DEVICE_RUN / "preflight.txt").read_text()
    rows = _table_rows(text)
    for name, (verdict, found) in DIFFERENCES.items():
        assert rows[name][2] == verdict, name
        assert rows[name][1].startswith(found), name
    assert rows["driver"][0] == "595.45.04 (open)" and rows["module-options"][0] == "nvidia_uvm uvm_disable_hmm=1"
    matching = {name for name, cells in rows.items() if cells[2] == "ok"}
    assert matching == {"gpus", "gpu-count", "bar1", "pcie-gen", "pcie-width", "persistence-mode", "force-p2p", "acs",
                        "iommu"}
    assert "preflight @local: 9 ok, 8 warn, 2 fail (2 blocking: gpu-model, compute-capability)" in text
    assert "nothing was changed on this host" in text
    assert text.rstrip().endswith("exit status: 1")
    assert (DEVICE_RUN / "preflight-dry.txt").read_text().rstrip().endswith("exit status: 1")


def test_verify_fails_exactly_what_a_deploy_must_not_leave() -> None:
    text = (DEVICE_RUN / "verify.txt").read_text()
    failed = re.findall(r"^FAILED tests/verify/test_gpus.py::test_check\[local-([a-z0-9-]+)\]", text, re.MULTILINE)
    assert failed == VERIFY_FAILURES
    assert "6 failed, 13 passed" in text and text.rstrip().endswith("exit status: 1")
    for name in VERIFY_FAILURES:
        assert re.search(rf"^E +AssertionError: {name}: expected ", text, re.MULTILINE), name


def test_checks_rerun_on_the_captured_facts_give_the_same_verdicts() -> None:
    rows = _table_rows((DEVICE_RUN / "preflight.txt").read_text())
    checks = run_checks(profile("2x-pix"), capture_facts(DEVICE_RUN / "facts"))
    printed = {name: cells[2] for name, cells in rows.items()}
    rerun = {check.name: ("fail (blocking)" if check.blocking else check.verdict) for check in checks}
    # The capture predates the known-failures check (no fact-KnownFailureLogs.txt): it reads as none found.
    assert rerun.pop("known-failures") == "ok"
    assert rerun == printed


def test_probe_ran_every_step() -> None:
    log = (DEVICE_RUN / "probe.log").read_text()
    assert "probe: 3 steps, all ok" in log and log.rstrip().endswith("exit status: 0")
    probe_run = (DEVICE_RUN / "preflight-probe.txt").read_text()
    assert "probe: GPU0<->GPU1: peer access yes" in probe_run and "probe failed" not in probe_run
