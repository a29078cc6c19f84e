"""rigforge/remote/fetch.py against a real HTTP server on 127.0.0.1 (tests/support_range_server.py).

Dropped connections, ignored Range headers and killed clients are produced with real sockets and a
real child process; nothing in the downloader is mocked.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rigforge.remote.fetch import FetchError, InputError, VerifyError, fetch, sha256_file
from tests.support_range_server import RangeServer
from tests.support_remote import oldest_python

FETCH_SCRIPT = Path(__file__).resolve().parents[2] / "rigforge" / "remote" / "fetch.py"
PAYLOAD = hashlib.sha256(b"seed").digest() * (3 * 1024 * 1024 // 32 + 7)  # ~3 MiB, not chunk-aligned
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()
TOKEN = "hf_secret_token_never_printed"


@pytest.fixture
def server() -> Iterator[RangeServer]:
    with RangeServer(PAYLOAD) as running:
        yield running


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(FETCH_SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_full_download_verifies_and_leaves_no_part(
    server: RangeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "deeper" / "model.bin"
    result = fetch(server.url(), str(dest), sha256=PAYLOAD_SHA, size=len(PAYLOAD), progress_every=0)
    assert dest.read_bytes() == PAYLOAD
    assert not Path(f"{dest}.part").exists()
    assert (result.size, result.sha256, result.resumed_from, result.downloaded) == (
        len(PAYLOAD),
        PAYLOAD_SHA,
        0,
        True,
    )
    err = capsys.readouterr().err
    assert "%" in err and "MB/s" in err  # progress lines
    assert err.strip().splitlines()[-1].startswith("model.bin: 3.1 MB in ")  # one-line summary
    assert server.requests[0]["range"] is None


def test_second_run_does_nothing(server: RangeServer, tmp_path: Path) -> None:
    dest = tmp_path / "model.bin"
    fetch(server.url(), str(dest), sha256=PAYLOAD_SHA)
    again = fetch(server.url(), str(dest), sha256=PAYLOAD_SHA)
    assert not again.downloaded
    assert len(server.requests) == 1


def test_dropped_connection_keeps_part_and_next_run_resumes(server: RangeServer, tmp_path: Path) -> None:
    dest = tmp_path / "model.bin"
    server.cuts = [1_000_003]
    with pytest.raises(FetchError, match="connection closed after 1000003 of"):
        fetch(server.url(), str(dest), sha256=PAYLOAD_SHA, retries=0)
    assert not dest.exists()
    assert Path(f"{dest}.part").stat().st_size == 1_000_003

    result = fetch(server.url(), str(dest), sha256=PAYLOAD_SHA, retries=0)
    assert server.requests[-1]["range"] == "bytes=1000003-"
    assert result.resumed_from == 1_000_003
    assert sha256_file(str(dest)) == PAYLOAD_SHA


def test_retries_resume_within_one_call(server: RangeServer, tmp_path: Path) -> None:
    dest = tmp_path / "model.bin"
    server.cuts = [500_000, 700_000]
    fetch(server.url(), str(dest), sha256=PAYLOAD_SHA, retries=2, retry_wait=0)
    assert [r["range"] for r in server.requests] == [None, "bytes=500000-", "bytes=1200000-"]
    assert dest.read_bytes() == PAYLOAD


def test_killed_client_process_resumes(server: RangeServer, tmp_path: Path) -> None:
    dest = tmp_path / "model.bin"
    part = Path(f"{dest}.part")
    server.hold_after = 1_500_000  # the server stalls here, so the kill lands mid-download
    child = subprocess.Popen(
        [sys.executable, str(FETCH_SCRIPT), server.url(), str(dest)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60  # generous: only bounds a hang, never decides the verdict
        while not (part.exists() and part.stat().st_size == 1_500_000):
            assert time.monotonic() < deadline, "child never wrote the first 1.5 MB"
            time.sleep(0.02)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        server.release.set()
    assert not dest.exists()

    done = run_cli(server.url(), str(dest), "--sha256", PAYLOAD_SHA)
    assert done.returncode == 0, done.stderr
    assert server.requests[-1]["range"] == "bytes=1500000-"
    assert "resumed at 1.5 MB" in done.stderr and "sha256 ok" in done.stderr
    assert sha256_file(str(dest)) == PAYLOAD_SHA


def test_server_ignoring_range_restarts_from_zero(
    server: RangeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "model.bin"
    Path(f"{dest}.part").write_bytes(b"stale bytes from some other file")
    server.ignore_range = True
    fetch(server.url(), str(dest), sha256=PAYLOAD_SHA)
    assert server.requests[0]["range"] == "bytes=32-"
    assert "did not resume; restarting" in capsys.readouterr().err
    assert dest.read_bytes() == PAYLOAD


def test_complete_part_is_installed_after_416(server: RangeServer, tmp_path: Path) -> None:
    dest = tmp_path / "model.bin"
    Path(f"{dest}.part").write_bytes(PAYLOAD)  # e.g. killed between the last byte and the rename
    fetch(server.url(), str(dest), sha256=PAYLOAD_SHA)
    assert dest.read_bytes() == PAYLOAD
    assert len(server.requests) == 1


def test_complete_part_of_known_size_needs_no_request(server: RangeServer, tmp_path: Path) -> None:
    dest = tmp_path / "model.bin"
    Path(f"{dest}.part").write_bytes(PAYLOAD)
    fetch(server.url(), str(dest), sha256=PAYLOAD_SHA, size=len(PAYLOAD))
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == []


def test_wrong_sha256_deletes_download(server: RangeServer, tmp_path: Path) -> None:
    dest = tmp_path / "model.bin"
    with pytest.raises(VerifyError, match=f"sha256 is {PAYLOAD_SHA}, expected {'0' * 64}"):
        fetch(server.url(), str(dest), sha256="0" * 64)
    assert not dest.exists() and not Path(f"{dest}.part").exists()


def test_short_file_is_refused(server: RangeServer, tmp_path: Path) -> None:
    dest = tmp_path / "model.bin"
    with pytest.raises(VerifyError, match=f"server has {len(PAYLOAD)} bytes, expected {len(PAYLOAD) + 1}"):
        fetch(server.url(), str(dest), size=len(PAYLOAD) + 1)
    assert not dest.exists() and not Path(f"{dest}.part").exists()


def test_existing_wrong_dest_is_replaced(server: RangeServer, tmp_path: Path) -> None:
    dest = tmp_path / "model.bin"
    dest.write_bytes(b"not the model")
    assert fetch(server.url(), str(dest), sha256=PAYLOAD_SHA).downloaded
    assert dest.read_bytes() == PAYLOAD


def write_header_file(path: Path, mode: int) -> Path:
    path.write_text(f"# token for the model hub\nAuthorization: Bearer {TOKEN}\n")
    path.chmod(mode)
    return path


def test_header_file_sent_but_never_printed(server: RangeServer, tmp_path: Path) -> None:
    headers = write_header_file(tmp_path / "auth", 0o600)
    done = run_cli(server.url(), str(tmp_path / "m.bin"), "--header-file", str(headers))
    assert done.returncode == 0, done.stderr
    assert server.requests[0]["authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in done.stdout + done.stderr


def test_header_file_readable_by_others_is_refused(server: RangeServer, tmp_path: Path) -> None:
    headers = write_header_file(tmp_path / "auth", 0o644)
    with pytest.raises(InputError, match="must be 0600"):
        fetch(server.url(), str(tmp_path / "m.bin"), header_file=str(headers))
    done = run_cli(server.url(), str(tmp_path / "m.bin"), "--header-file", str(headers))
    assert done.returncode == 2 and TOKEN not in done.stderr
    assert server.requests == []


def test_malformed_header_line_is_named_by_number_only(tmp_path: Path) -> None:
    headers = tmp_path / "auth"
    headers.write_text(f"Bearer {TOKEN}\n")
    headers.chmod(0o600)
    with pytest.raises(InputError, match="line 1 is not") as refused:
        fetch("http://127.0.0.1:9/x", str(tmp_path / "m.bin"), header_file=str(headers))
    assert TOKEN not in str(refused.value)


def test_secret_headers_follow_same_host_redirects(server: RangeServer, tmp_path: Path) -> None:
    headers = write_header_file(tmp_path / "auth", 0o600)
    fetch(server.url("/redirect-same"), str(tmp_path / "m.bin"), header_file=str(headers))
    assert [r["path"] for r in server.requests] == ["/redirect-same", "/file"]
    assert server.requests[1]["authorization"] == f"Bearer {TOKEN}"


def test_secret_headers_dropped_on_redirect_to_other_host(server: RangeServer, tmp_path: Path) -> None:
    headers = write_header_file(tmp_path / "auth", 0o600)
    fetch(server.url("/redirect-other"), str(tmp_path / "m.bin"), header_file=str(headers))
    assert server.requests[0]["authorization"] == f"Bearer {TOKEN}"
    assert server.requests[1]["host"] == f"127.1:{server.port}"
    assert server.requests[1]["authorization"] is None


def test_missing_file_fails_without_retrying(server: RangeServer, tmp_path: Path) -> None:
    done = run_cli(server.url("/absent"), str(tmp_path / "m.bin"), "--retries", "3")
    assert done.returncode == 1 and "HTTP 404" in done.stderr
    assert len(server.requests) == 1


def test_bad_sha256_argument_is_bad_input(tmp_path: Path) -> None:
    done = run_cli("http://127.0.0.1:9/x", str(tmp_path / "m.bin"), "--sha256", "abc")
    assert done.returncode == 2 and "64 hex digits" in done.stderr


def test_sha256_file_streams(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(PAYLOAD)
    assert sha256_file(str(path), chunk=4096) == PAYLOAD_SHA
    assert os.path.getsize(path) == len(PAYLOAD)


def test_script_runs_on_oldest_rig_python(server: RangeServer, tmp_path: Path) -> None:
    server.cuts = [1_000_000]
    dest = tmp_path / "m.bin"
    command = [oldest_python(), str(FETCH_SCRIPT), server.url(), str(dest), "--sha256", PAYLOAD_SHA]
    done = subprocess.run([*command, "--retries", "0"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "kept for a resume" in done.stderr
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert dest.read_bytes() == PAYLOAD
