"""The huggingface source (``weights_tool.py hf-download``) with the real huggingface_hub client.

The Hub cannot be reached from here, so a stand-in serves its HTTP API on 127.0.0.1 (HF_ENDPOINT): the
revision's file list with sizes, LFS sha256 and git blob ids (``/api/models/<repo>/revision/<rev>``) and
the files (``/<repo>/resolve/<commit>/<path>``, HEAD + GET with ranges), as huggingface_hub 2.4 asks for
them. Everything else — the client, the tool, the files, the manifest — is real.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")

TOOL = Path(__file__).resolve().parents[2] / "rigforge" / "remote" / "weights_tool.py"
REPO = "example-org/tiny-model"
TOKEN = "hf_not_a_real_token_0123456789"


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()  # noqa: S324 - git's scheme


class StandInHub:
    """Serves one repo whose revisions map to {path: bytes}; ``lfs`` names the LFS-stored paths."""

    def __init__(self, revisions: dict[str, dict[str, bytes]], lfs: set[str]) -> None:
        self.revisions, self.lfs = revisions, lfs
        self.corrupt: set[str] = set()  # paths served with a flipped byte
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Authorization)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def commit(self, revision: str) -> str:
        return hashlib.sha1(revision.encode()).hexdigest()  # noqa: S324 - a stand-in commit id

    def files_at(self, revision_or_commit: str) -> tuple[str, dict[str, bytes]]:
        for revision, files in self.revisions.items():
            if revision_or_commit in (revision, self.commit(revision)):
                return self.commit(revision), files
        raise KeyError(revision_or_commit)

    def info(self, revision: str) -> dict:
        commit, files = self.files_at(revision)
        siblings = []
        for name, data in files.items():
            sibling = {"rfilename": name, "size": len(data), "blobId": git_blob_id(data)}
            if name in self.lfs:
                sibling["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 130}
            siblings.append(sibling)
        return {"id": REPO, "modelId": REPO, "sha": commit, "private": False, "siblings": siblings}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, head_only: bool) -> None:
                hub.requests.append((self.command, self.path, self.headers.get("Authorization")))
                path = self.path.split("?", 1)[0]
                api = re.fullmatch(rf"/api/models/{REPO}/revision/([^/]+)", path)
                resolve = re.fullmatch(rf"/{REPO}/resolve/([^/]+)/(.+)", path)
                tree = re.fullmatch(rf"/api/models/{REPO}/tree/([^/]+)", path)
                if tree:
                    entries = [{"type": "file", "path": s["rfilename"], "size": s["size"], "oid": s["blobId"],
                                **({"lfs": {"oid": s["lfs"]["sha256"], "size": s["size"], "pointerSize": 130}}
                                   if "lfs" in s else {})}
                               for s in hub.info(tree.group(1))["siblings"]]
                    self._send(200, json.dumps(entries).encode(), {"Content-Type": "application/json"}, head_only)
                elif api:
                    body = json.dumps(hub.info(api.group(1))).encode()
                    self._send(200, body, {"Content-Type": "application/json"}, head_only)
                elif resolve and resolve.group(2) in hub.files_at(resolve.group(1))[1]:
                    commit, files = hub.files_at(resolve.group(1))
                    name = resolve.group(2)
                    data = files[name]
                    etag = hashlib.sha256(data).hexdigest() if name in hub.lfs else git_blob_id(data)
                    if name in hub.corrupt:
                        data = data[:-1] + bytes([data[-1] ^ 0xFF])
                    headers = {"X-Repo-Commit": commit, "ETag": f'"{etag}"', "Accept-Ranges": "bytes"}
                    match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
                    if match and not head_only:
                        start = int(match.group(1))
                        headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                        self._send(206, data[start:], headers, head_only)
                    else:
                        self._send(200, data, headers, head_only)
                else:
                    self._send(404, b'{"error": "not found"}', {"X-Error-Code": "EntryNotFound"}, head_only)

            def _send(self, status: int, body: bytes, headers: dict[str, str], head_only: bool) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head_only:
                    self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - name fixed by http.server
                self._answer(head_only=False)

            def do_HEAD(self) -> None:  # noqa: N802 - name fixed by http.server
                self._answer(head_only=True)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - signature fixed
                pass

        return Handler

    def __enter__(self) -> StandInHub:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


V1 = {"config.json": b'{"model_type": "tiny"}\n', "model.safetensors": os.urandom(300_000),
      "README.md": b"# not wanted\n"}
V2 = {**V1, "model.safetensors": os.urandom(300_000)}


@pytest.fixture()
def hub() -> Iterator[StandInHub]:
    with StandInHub({"v1": V1, "v2": V2}, lfs={"model.safetensors"}) as server:
        yield server


@pytest.fixture()
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "hf.env"
    path.write_text(f"HF_TOKEN={TOKEN}\n")
    path.chmod(0o600)
    return path


def download(folder: Path, hub: StandInHub, revision: str, token_file: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(folder.parent / "hf-home"),
           "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1"}
    return subprocess.run([sys.executable, str(TOOL), "hf-download", "--dir", str(folder), "--repo", REPO,
                           "--revision", revision, "--allow", "*.json", "--allow", "*.safetensors",
                           "--token-file", str(token_file)],
                          capture_output=True, text=True, env=env, timeout=120)


def file_downloads(hub: StandInHub) -> list[str]:
    return [path.rsplit("/", 1)[-1] for method, path, _ in hub.requests if method == "GET" and "/resolve/" in path]


def test_pinned_revision_lands_verified_and_recorded(tmp_path: Path, hub: StandInHub, token_file: Path) -> None:
    folder = tmp_path / "model"
    done = download(folder, hub, "v1", token_file)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in folder.iterdir()) == [".rigforge-manifest.json", "config.json", "model.safetensors"]
    assert (folder / "model.safetensors").read_bytes() == V1["model.safetensors"]
    manifest = json.loads((folder / ".rigforge-manifest.json").read_text())
    assert (manifest["source"], manifest["origin"], manifest["revision"]) == ("huggingface", REPO, "v1")
    assert manifest["allow_patterns"] == ["*.json", "*.safetensors"]
    assert {e["name"]: e["sha256"] for e in manifest["files"]} == {
        name: hashlib.sha256(V1[name]).hexdigest() for name in ("config.json", "model.safetensors")}
    # The token reaches the hub, from the file; it is never printed.
    assert {auth for _, _, auth in hub.requests} == {f"Bearer {TOKEN}"}
    assert TOKEN not in done.stdout + done.stderr


def test_second_run_downloads_nothing(tmp_path: Path, hub: StandInHub, token_file: Path) -> None:
    folder = tmp_path / "model"
    assert download(folder, hub, "v1", token_file).returncode == 0
    hub.requests.clear()
    again = download(folder, hub, "v1", token_file)
    assert again.returncode == 0, again.stderr
    assert "0 downloaded" in again.stdout
    assert file_downloads(hub) == []


def test_new_revision_fetches_only_the_changed_file(tmp_path: Path, hub: StandInHub, token_file: Path) -> None:
    folder = tmp_path / "model"
    assert download(folder, hub, "v1", token_file).returncode == 0
    hub.requests.clear()
    assert download(folder, hub, "v2", token_file).returncode == 0
    assert file_downloads(hub) == ["model.safetensors"]
    assert (folder / "model.safetensors").read_bytes() == V2["model.safetensors"]


def test_wrong_bytes_from_the_hub_never_get_the_final_name(tmp_path: Path, hub: StandInHub,
                                                           token_file: Path) -> None:
    hub.corrupt = {"model.safetensors"}
    folder = tmp_path / "model"
    failed = download(folder, hub, "v1", token_file)
    assert failed.returncode == 1
    assert "model.safetensors: sha256 is" in failed.stderr
    assert not (folder / "model.safetensors").exists()


def test_a_token_file_others_can_read_is_refused(tmp_path: Path, hub: StandInHub, token_file: Path) -> None:
    token_file.chmod(0o644)
    failed = download(tmp_path / "model", hub, "v1", token_file)
    assert failed.returncode == 1 and "mode 0600" in failed.stderr
    assert hub.requests == []
