"""rigforge/remote/engine_entry.py for real: a process started through it, as the engine's container starts it.

The engine is a STAND-IN module (tests/standins/api_engine.py; vLLM and SGLang cannot run without GPUs): like
them it parses ``--api-key``, logs and prints the arguments it parsed, and starts a ``spawn`` worker; it reports
what it and its worker saw in their own /proc entries. The same run in a real container, started with the
engine unit's mounts: tests/e2e/test_engine_entry_container.py.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ROOT / "rigforge" / "remote" / "engine_entry.py"
STANDIN = ROOT / "tests" / "standins" / "api_engine.py"
KEY = "k3y-that-must-stay-in-its-file-5f2b9c"


@pytest.fixture()
def engine(tmp_path: Path) -> Path:
    package = tmp_path / "standin"
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copy(STANDIN, package / "serve.py")
    return tmp_path


def run_entry(engine: Path, *words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ENTRY), *words], cwd=engine, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(engine), "PATH": "/usr/bin:/bin"})


def test_the_module_gets_the_key_and_no_command_line_environment_or_output_shows_it(engine: Path) -> None:
    key_file, report = engine / "key", engine / "report.json"
    key_file.write_text(KEY + "\n")
    done = run_entry(engine, "--api-key-file", str(key_file), "-m", "standin.serve", "--port", "8000",
                     "--report", str(report))
    assert done.returncode == 0, done.stderr
    seen = json.loads(report.read_text())
    assert seen["key_sha256"] == hashlib.sha256(KEY.encode()).hexdigest(), "the module did not get the key"
    assert seen["name"] == "__main__" and seen["argv0"].endswith("standin/serve.py"), "not run as python -m runs it"
    assert not (seen["cmdline_has_key"] or seen["environ_has_key"] or seen["key_in_os_environ"]), seen
    assert seen["child"] == {"cmdline": False, "environ": False} and seen["child_exit"] == 0, seen
    output = done.stdout + done.stderr
    assert KEY not in output, "the key reached the engine's output"
    assert "api_key='<api-key>'" in done.stdout and "'api_key': '<api-key>'" in done.stderr
    assert "api_key=<api-key>" in done.stderr


@pytest.mark.parametrize(("content", "words", "message"), [
    (None, None, "engine_entry: cannot read the API key file"),
    ("\n", None, "engine_entry: the API key file {key} is empty"),
    (KEY, ["-m", "standin.serve"], "engine_entry: usage: engine_entry.py --api-key-file FILE -m MODULE"),
])
def test_no_start_without_a_key(engine: Path, content: str | None, words: list[str] | None, message: str) -> None:
    key_file = engine / "key"
    if content is not None:
        key_file.write_text(content)
    done = run_entry(engine, *(words or ["--api-key-file", str(key_file), "-m", "standin.serve"]))
    assert done.returncode == 2 and message.format(key=key_file) in done.stderr
    assert KEY not in done.stderr
