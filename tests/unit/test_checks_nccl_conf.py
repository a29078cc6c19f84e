"""The nccl-conf check: /etc/nccl.conf must not name the NCCL graph. The fact's command run for real by sh on
files of each kind (the 8x-turin file as rigforge writes it now, and as it wrote it before the graph moved to the
engine's environment), its parser on garbled output, and the check's verdict for each."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from rigforge.checks import run_checks
from rigforge.checks.nccl import check_nccl_conf
from rigforge.facts.nccl import NcclConf, NcclConfFile, parse_nccl_conf
from tests.support_checks import empty_facts, profile

GOLDEN_CONF = Path(__file__).resolve().parents[1] / "golden" / "host" / "8x-turin" / "etc" / "nccl.conf"
#: The line rigforge's earlier nccl.conf template wrote last on 8x-turin (the golden file then ended with it).
OLD_LINE = "NCCL_GRAPH_FILE=/etc/nccl_graph_opt.xml\n"


def _read(path: Path) -> NcclConfFile | None:
    fact = NcclConf()
    run = subprocess.run(["sh", "-c", fact.command(str(path))], capture_output=True, text=True, check=True)
    lines = run.stdout.splitlines()
    return fact.process(lines) if lines else fact.default()


def _check(name: str, conf: NcclConfFile | None):
    return check_nccl_conf(profile(name), replace(empty_facts(), nccl_conf=conf))


def test_the_file_rigforge_writes_now_passes(tmp_path: Path) -> None:
    conf = tmp_path / "nccl.conf"
    conf.write_text(GOLDEN_CONF.read_text())
    read = _read(conf)
    assert read is not None and read.ours
    assert list(read.settings) == ["NCCL_P2P_LEVEL", "NCCL_IB_DISABLE", "NCCL_NET_GDR_LEVEL", "NCCL_MIN_NCHANNELS",
                                   "NCCL_ALLOC_P2P_NET_LL_BUFFERS"]
    check = _check("8x-turin", read)
    assert check is not None and (check.verdict, check.found) == ("ok", "5 NCCL settings, no NCCL_GRAPH_FILE")


def test_a_rig_provisioned_with_the_old_line_is_fixed_by_the_deploy(tmp_path: Path) -> None:
    conf = tmp_path / "nccl.conf"
    conf.write_text(GOLDEN_CONF.read_text() + OLD_LINE)
    check = _check("8x-turin", _read(conf))
    assert check is not None and check.verdict == "warn" and check.deploy_fixes
    assert check.found == "NCCL_GRAPH_FILE=/etc/nccl_graph_opt.xml (rigforge's file)"
    assert "fails on fewer GPUs than it names ('XML Import Channel : dev N not found')" in check.fix
    assert "deploys/host.py writes /etc/nccl.conf without it" in check.fix
    # The row sits in the preflight table between secure-boot and model-revision.
    names = [row.name for row in run_checks(profile("8x-turin"), replace(empty_facts(), nccl_conf=_read(conf)))]
    assert names[names.index("nccl-conf") + 1] == "model-revision"


def test_an_owners_file_on_a_rig_without_nccl_settings_gets_advice(tmp_path: Path) -> None:
    conf = tmp_path / "nccl.conf"
    conf.write_text("# my settings\nNCCL_DEBUG=WARN\n" + OLD_LINE)
    read = _read(conf)
    assert read == NcclConfFile(ours=False,
                                settings={"NCCL_DEBUG": "WARN", "NCCL_GRAPH_FILE": "/etc/nccl_graph_opt.xml"})
    check = _check("sandbox", read)  # no nccl section: rigforge leaves an owner's /etc/nccl.conf alone
    assert check is not None and check.verdict == "warn" and not check.deploy_fixes
    assert check.fix.endswith("remove the line from /etc/nccl.conf and give the graph only to the program that "
                              "needs it")


def test_no_file_is_nothing_to_judge(tmp_path: Path) -> None:
    assert _read(tmp_path / "missing") is None
    assert _check("8x-turin", None) is None


@pytest.mark.parametrize("output", [["NCCL_P2P_LEVEL=SYS"], ["rigforge"], ["cat: /etc/nccl.conf: Permission denied"]])
def test_garbled_output_is_an_error_naming_the_fact(output: list[str]) -> None:
    with pytest.raises(ValueError, match="NcclConf"):
        parse_nccl_conf(output)
