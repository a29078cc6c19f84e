"""Facts read ahead in one remote command: the sections, their errors, and the values on a real shell.

The combined command runs on this machine through pyinfra's @local connector (a real shell, the same
code path as SSH); every value read ahead is compared with the one pyinfra reads on its own.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import gevent
import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.host import Host
from pyinfra.api.state import StateStage
from pyinfra.facts.files import File, FindInFile, Sha256File
from pyinfra.facts.server import Command, Hostname, Which

from rigforge.facts.packages import DpkgPackages
from rigforge.reads import combined, read_ahead
from rigforge.reads.combined import (
    MISSING_COMMAND_MARKER,
    CombinedReadError,
    FactRead,
    Section,
    section_value,
    split_sections,
)

MARKER = "@@rigforge-read-test"
TWO = [FactRead.of(File, path="/etc/hostname"), FactRead.of(Hostname)]


def framed(*sections: tuple[list[str], int]) -> list[str]:
    lines: list[str] = []
    for index, (body, status) in enumerate(sections):
        lines += [f"{MARKER} {index}", *body, "", f"{MARKER} {index} end {status}"]
    return lines


def test_a_read_is_keyed_as_pyinfra_binds_its_arguments() -> None:
    assert FactRead.of(File, "/etc/x") == FactRead.of(File, path="/etc/x")
    assert FactRead.of(FindInFile, "/etc/x", "marker").name == "FindInFile(extended_regex=False, " \
        "interpolate_variables=False, path=/etc/x, pattern=marker)"
    assert FactRead.from_record(FactRead.of(Sha256File, path="/a").to_record()) == FactRead.of(Sha256File, "/a")


def test_a_record_naming_a_fact_that_is_gone_is_refused() -> None:
    with pytest.raises(ValueError, match="no fact"):
        FactRead.from_record({"fact": "rigforge.facts.driver:NoSuchFact", "kwargs": {}})
    with pytest.raises(ValueError, match="is not a fact"):
        FactRead.from_record({"fact": "pathlib:Path", "kwargs": {}})


def test_sections_split_into_each_facts_lines_and_status() -> None:
    sections = split_sections(framed((["a", "b"], 0), ([], 1)), TWO, MARKER)
    assert [(section.lines, section.status) for section in sections] == [(["a", "b"], 0), ([], 1)]


def test_an_output_without_its_last_newline_keeps_every_line() -> None:
    lines = [f"{MARKER} 0", "a", f"{MARKER} 0 end 0", f"{MARKER} 1", "", "", f"{MARKER} 1 end 0"]
    sections = split_sections(lines, TWO, MARKER)
    assert sections[0].lines == ["a"] and sections[1].lines == [""]


@pytest.mark.parametrize(("lines", "named"), [
    (framed((["a"], 0))[:4], "Hostname()"),                                       # second section missing
    (framed((["a"], 0), (["b"], 0))[:-1], "Hostname()"),                          # not terminated
    ([f"{MARKER} 1", "b", f"{MARKER} 1 end 0"], "File(path=/etc/hostname)"),      # out of order
    ([f"{MARKER} 0", "a", f"{MARKER} 0 end ?", *framed((["b"], 0))[4:]], "File(path=/etc/hostname)"),
    ([], "File(path=/etc/hostname)"),                                             # nothing at all
])
def test_a_missing_or_garbled_section_is_an_error_naming_the_fact(lines: list[str], named: str) -> None:
    with pytest.raises(CombinedReadError, match=named.replace("(", r"\(").replace(")", r"\)")):
        split_sections(lines, TWO, MARKER)


def test_output_after_the_last_section_is_an_error() -> None:
    with pytest.raises(CombinedReadError, match="after the last"):
        split_sections(framed((["a"], 0), (["b"], 0)) + ["stray"], TWO, MARKER)


def test_a_failed_or_unparsable_section_is_left_for_pyinfra_to_read() -> None:
    packages = FactRead.of(DpkgPackages)
    assert section_value(packages, Section(["ii  curl  7.88.1-10  amd64  tool"], 1)) == (False, None)
    assert section_value(FactRead.of(Which, command="nvidia-smi"), Section([MISSING_COMMAND_MARKER])) == (False, None)
    assert section_value(FactRead.of(Hostname), Section([])) == (True, None)  # empty output: the fact's default


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[State, Host]]:
    monkeypatch.setenv("RIGFORGE_READS_DIR", str(tmp_path / "reads"))
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    state.set_stage(StateStage.Prepare)
    read_ahead.install()
    yield state, state.inventory.get_host("@local")


def counted(host: Host, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    sent: list[str] = []
    original = type(host.connector).run_shell_command

    def run(self, command, **kwargs):  # noqa: ANN001, ANN202 - pyinfra's signature
        sent.append(str(command))
        return original(self, command, **kwargs)

    monkeypatch.setattr(type(host.connector), "run_shell_command", run)
    return sent


def test_recorded_reads_come_back_in_one_command_with_pyinfra_own_values(
        local: tuple[State, Host], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state, host = local
    target = tmp_path / "managed.conf"
    target.write_text("# managed by rigforge\nvalue = 1\n")
    # An access time after the change time, so the reads below leave it alone (relatime): otherwise the first
    # read of the new file moves it, and a second that ticks between two reads of File differs.
    mtime_ns = target.stat().st_mtime_ns
    os.utime(target, ns=(mtime_ns + 60 * 10**9, mtime_ns))
    reads = [FactRead.of(File, path=str(target)), FactRead.of(Sha256File, path=str(target)),
             FactRead.of(FindInFile, path=str(target), pattern="managed by rigforge"),
             FactRead.of(File, path=str(tmp_path / "absent")), FactRead.of(Command, command="printf 'x\\n\\n'"),
             FactRead.of(Command, command="exit 3")]
    read_ahead.save_reads(read_ahead.record_path("deploys/test.py", host.name), reads)
    direct = {read: read_ahead._original_get_fact(state, host, read.fact, kwargs=read.kwargs) for read in reads[:5]}
    sent = counted(host, monkeypatch)
    read_ahead.read_ahead(state, "deploys/test.py")
    assert len(sent) == 1
    values = {read: host.get_fact(read.fact, **read.kwargs) for read in reads[:5]}
    assert values == direct and len(sent) == 1
    assert values[reads[4]] == "x\n"  # pyinfra's own trailing-line handling, not the framing's
    with pytest.raises(PyinfraError, match="No hosts remaining"):  # the only host failed on its fact
        host.get_fact(Command, command="exit 3")  # failed ahead: pyinfra reads (and fails) it on its own
    assert len(sent) == 2 and host in state.failed_hosts


def test_a_command_that_may_change_the_host_drops_the_read_ahead(
        local: tuple[State, Host], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state, host = local
    target = tmp_path / "file"
    target.write_text("before\n")
    read_ahead.save_reads(read_ahead.record_path("deploys/drop.py", host.name), [FactRead.of(Sha256File, str(target))])
    read_ahead.read_ahead(state, "deploys/drop.py")
    before = host.get_fact(Sha256File, path=str(target))
    with read_ahead.not_a_change(host):
        host.run_shell_command("true")
    assert host.get_fact(Sha256File, path=str(target)) == before
    host.run_shell_command(f"echo after > {target}")
    assert host.get_fact(Sha256File, path=str(target)) != before


def test_every_read_of_the_run_is_recorded_for_the_next(local: tuple[State, Host], tmp_path: Path) -> None:
    state, host = local
    read_ahead.read_ahead(state, "deploys/record.py")
    host.get_fact(File, path=str(tmp_path))
    host.get_fact(Hostname)
    read_ahead._save_all()
    recorded = read_ahead.load_reads(read_ahead.record_path("deploys/record.py", host.name))
    assert recorded == [FactRead.of(File, path=str(tmp_path)), FactRead.of(Hostname)]


def test_a_host_whose_deploy_code_runs_meanwhile_waits_for_the_read_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyinfra runs the deploy code of every host in parallel: the hosts after the first must not go on (and
    read their facts one by one) while the first one's call is still reading ahead for all of them."""
    state = State(Inventory((["@local"], {})), Config())
    finished: list[str] = []

    def slow_read(state: State, deploy: str) -> None:
        gevent.sleep(0.2)
        finished.append("read ahead")

    monkeypatch.setattr(read_ahead, "_read_all_hosts", slow_read)
    first = gevent.spawn(read_ahead.read_ahead, state, "deploys/host.py")
    gevent.sleep(0)  # the first host's call is under way
    second = gevent.spawn(lambda: (read_ahead.read_ahead(state, "deploys/host.py"), finished.append("second")))
    gevent.joinall([first, second], raise_error=True)
    assert finished == ["read ahead", "second"]


def test_reads_past_the_command_budget_go_in_several_commands_and_a_huge_one_alone(
        local: tuple[State, Host], monkeypatch: pytest.MonkeyPatch) -> None:
    """A deploy that read many facts (a recipes run: 424 KB of commands) must not send them as one: sshd drops the
    connection on a packet over 256 KiB ("Bad packet length 424044", then "message authentication code incorrect")."""
    state, host = local
    monkeypatch.setattr(combined, "COMMAND_BUDGET", 2000)
    padding = "x" * 300
    reads = [FactRead.of(Command, command=f"echo {index} || : {padding}") for index in range(12)]
    huge = FactRead.of(Command, command=f"echo huge || : {'y' * 3000}")
    read_ahead.save_reads(read_ahead.record_path("deploys/many.py", host.name), [*reads, huge])
    sent = counted(host, monkeypatch)
    read_ahead.read_ahead(state, "deploys/many.py")
    assert 2 <= len(sent) <= 4 and all(len(command) <= 2000 + 200 for command in sent)
    assert [host.get_fact(Command, command=read.kwargs["command"]) for read in reads] == [str(i) for i in range(12)]
    before = len(sent)
    assert host.get_fact(Command, command=huge.kwargs["command"]) == "huge"  # not read ahead: read on its own
    assert len(sent) == before + 1


def test_the_budget_stays_under_what_sshd_and_linux_take() -> None:
    assert combined.COMMAND_BUDGET * 2 <= 128 * 1024  # Linux's MAX_ARG_STRLEN; sshd's packet limit is 256 KiB
