"""Promise: the engine's API key never shows in what the engine prints or logs (docs/security.md).

In-process runs of rigforge/remote/engine_entry.py's ``main`` (the subprocess runs, as the container starts it,
are in tests/unit/test_engine_entry.py): the engine is a STAND-IN module written here (vLLM and SGLang cannot run
without GPUs) that, as they do, echoes the arguments it parsed to stdout, stderr and its logger.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rigforge.remote import engine_entry
from rigforge.serving.api_key import CONTAINER_ENTRY, CONTAINER_KEY_FILE, KeyedCommandError, keyed_command

KEY = "k3y-in-process-9d1e7a"

#: Prints and logs the key it was given, as vLLM ("non-default args") and SGLang (``server_args=``) do.
#: Like them it starts only as ``__main__``, and its spawned workers find it as ``sys.modules["__main__"]``.
ECHOING_ENGINE = '''
import json, logging, sys
if __name__ == "__main__":
    key = sys.argv[sys.argv.index("--api-key") + 1]
    print(f"server_args=ServerArgs(api_key='{key}')")
    print(f"non-default args: {{'api_key': '{key}'}}", file=sys.stderr)
    sys.stdout.writelines([f"argv {key}\\n", "second line\\n"])
    logging.getLogger("standin.engine").warning("args: %s", {"api_key": key})
    with open(sys.argv[sys.argv.index("--report") + 1], "w") as report:
        json.dump({"key": key, "argv": sys.argv, "main_file": sys.modules["__main__"].__file__,
                   "file": __file__}, report)
'''


@pytest.fixture()
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A key file and the echoing engine, importable; stdout, stderr, argv and logging restored afterwards."""
    (tmp_path / "standin_echo_engine.py").write_text(ECHOING_ENGINE)
    (tmp_path / "key").write_text(KEY + "\nsecond line ignored\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("stdout", "stderr", "argv"):
        monkeypatch.setattr(sys, name, getattr(sys, name))
    factory = logging.getLogRecordFactory()
    yield tmp_path
    logging.setLogRecordFactory(factory)
    sys.modules.pop("standin_echo_engine", None)


def run(engine: Path, *extra: str) -> int:
    return engine_entry.main(["--api-key-file", str(engine / "key"), "-m", "standin_echo_engine",
                              "--report", str(engine / "report"), *extra])


def test_the_engine_gets_the_key_and_its_stdout_stderr_and_log_records_show_only_the_mask(
        engine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logged = io.StringIO()
    handler = logging.StreamHandler(logged)
    logging.getLogger("standin.engine").addHandler(handler)
    try:
        assert run(engine) == 0
    finally:
        logging.getLogger("standin.engine").removeHandler(handler)
    seen = json.loads((engine / "report").read_text())
    assert seen["key"] == KEY, "the engine did not get the key from the file's first line"
    assert seen["argv"] == [seen["file"], "--report", str(engine / "report"), "--api-key", KEY]
    assert seen["main_file"] == seen["file"], "not run as python -m runs it: a spawned worker would not find it"
    out, err = capsys.readouterr()
    assert KEY not in out and KEY not in err and KEY not in logged.getvalue()
    assert "server_args=ServerArgs(api_key='<api-key>')" in out and "argv <api-key>\nsecond line\n" in out
    assert "non-default args: {'api_key': '<api-key>'}" in err
    assert "args: {'api_key': '<api-key>'}" in logged.getvalue()


def test_the_masked_streams_still_behave_as_the_streams_they_wrap(engine: Path) -> None:
    under = io.StringIO()
    masked = engine_entry.MaskedStream(under, KEY)  # type: ignore[arg-type]
    assert masked.write(f"a {KEY} b") == len(f"a {KEY} b"), "a write returns how much the caller wrote"
    masked.flush()  # what the stream does not override reaches the wrapped stream
    assert under.getvalue() == "a <api-key> b"


@pytest.mark.parametrize(("words", "content", "message"), [
    (["--api-key-file", "{key}", "-m"], KEY, engine_entry.USAGE),
    (["--api-key-file", "{key}", "-x", "mod"], KEY, engine_entry.USAGE),
    (["--key-file", "{key}", "-m", "mod"], KEY, engine_entry.USAGE),
    (["--api-key-file", "{key}", "-m", "mod"], " \n" + KEY, "the API key file {key} is empty"),
    (["--api-key-file", "{key}.missing", "-m", "mod"], KEY, "cannot read the API key file {key}.missing: No such"),
])
def test_no_engine_starts_without_a_key_and_the_error_never_shows_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], words: list[str], content: str, message: str) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(content)
    assert engine_entry.main([word.format(key=key_file) for word in words]) == 2
    err = capsys.readouterr().err
    assert err.startswith("engine_entry: " + message.format(key=key_file)) and KEY not in err


def test_the_module_runs_with_its_own_arguments_then_the_key(tmp_path: Path) -> None:
    (tmp_path / "key").write_text(KEY)
    assert engine_entry.parse(["--api-key-file", "k", "-m", "pkg.mod", "--port", "8000"]) == (
        "k", "pkg.mod", ["--port", "8000"])
    assert engine_entry.read_key(str(tmp_path / "key")) == KEY


def test_started_as_a_script_it_reads_its_own_command_line(engine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["engine_entry.py", "--api-key-file", str(engine / "key"), "-m",
                                      "standin_echo_engine", "--report", str(engine / "report")])
    assert engine_entry.main() == 0
    assert json.loads((engine / "report").read_text())["key"] == KEY


def test_a_container_engine_runs_through_the_entry_with_the_key_file_not_the_key() -> None:
    assert keyed_command(["python3", "-m", "sglang.launch_server"]) == [
        "python3", CONTAINER_ENTRY, "--api-key-file", CONTAINER_KEY_FILE, "-m", "sglang.launch_server"]


@pytest.mark.parametrize("command", [["vllm", "serve", "model"], ["python3", "-m"],
                                     ["python3", "-m", "vllm.entrypoints.openai.api_server", "--port"],
                                     ["python3", "-c", "x"]])
def test_a_command_the_entry_cannot_wrap_is_refused_saying_what_to_do(command: list[str]) -> None:
    with pytest.raises(KeyedCommandError) as refused:
        keyed_command(command)
    assert str(refused.value) == (
        f"engine.command {command} must be [python, -m, module] for the engine to get its API key without a "
        "command line that shows it (engine.auth); or serve it on loopback (engine.host: 127.0.0.1)")
