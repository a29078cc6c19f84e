"""STAND-IN for the Hugging Face Hub (tests only: the real Hub cannot be reached from the test machine).

Serves one model repository's HTTP API the way huggingface_hub 2.4 asks for it: the revision's file list
with sizes, LFS sha256 and git blob ids (``/api/models/<repo>/revision/<rev>``, ``.../tree/<rev>``) and the
files (``/<repo>/resolve/<commit>/<path>``, HEAD + GET with ranges). Everything that talks to it — the
client, rigforge's weights tool, the files, the manifest — is real.

Two options make it behave like a gated repository on a slow link:

- ``token_sha256``: every request must carry ``Authorization: Bearer <token>`` whose sha256 is this, or it is
  answered 401 ``GatedRepo`` as the real Hub does; so a finished download proves the token got there. Only
  the hash is given to the server: the token itself is on none of its command lines and in none of its files.
- ``rate``: file bodies are sent at this many bytes per second, so a download lasts long enough to be
  watched while it runs.

Standard library only: the unit tests run it in-process, the e2e tests run this very file inside a sandbox
host (``python3 hf_hub.py --dir FILES ...``) on that host's 127.0.0.1. It logs nothing (not even request
lines), so the host's journal holds only what rigforge itself made.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = "example-org/tiny-model"
#: Bytes written per step of a rate-limited body.
SEND_CHUNK = 256 * 1024


def git_blob_id(data: bytes) -> str:
    """The git object id the Hub reports for a non-LFS file."""
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()  # noqa: S324 - git's scheme


def commit_id(revision: str) -> str:
    """The stand-in commit id of a revision name (what a profile pins as ``model.revision``)."""
    return hashlib.sha1(revision.encode()).hexdigest()  # noqa: S324 - a stand-in commit id


class StandInHub:
    """Serves one repo whose revisions map to {path: bytes}; ``lfs`` names the LFS-stored paths."""

    def __init__(self, revisions: dict[str, dict[str, bytes]], lfs: set[str], repo: str = REPO,
                 token_sha256: str | None = None, rate: float | None = None, port: int = 0) -> None:
        self.revisions, self.lfs, self.repo = revisions, lfs, repo
        self.token_sha256, self.rate = token_sha256, rate
        self.corrupt: set[str] = set()  # paths served with a flipped byte
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Authorization), in memory only
        self._digests: dict[tuple[str, int], tuple[str, str]] = {}  # (name, id of its bytes): (sha256, blob id)
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def files_at(self, revision_or_commit: str) -> tuple[str, dict[str, bytes]]:
        for revision, files in self.revisions.items():
            if revision_or_commit in (revision, commit_id(revision)):
                return commit_id(revision), files
        raise KeyError(revision_or_commit)

    def digests(self, name: str, data: bytes) -> tuple[str, str]:
        """(sha256, git blob id) of a served file, computed once: a model file takes a second to hash."""
        key = (name, id(data))
        if key not in self._digests:
            self._digests[key] = (hashlib.sha256(data).hexdigest(), git_blob_id(data))
        return self._digests[key]

    def info(self, revision: str) -> dict:
        commit, files = self.files_at(revision)
        siblings = []
        for name, data in files.items():
            sha256, blob_id = self.digests(name, data)
            sibling = {"rfilename": name, "size": len(data), "blobId": blob_id}
            if name in self.lfs:
                sibling["lfs"] = {"sha256": sha256, "size": len(data), "pointerSize": 130}
            siblings.append(sibling)
        return {"id": self.repo, "modelId": self.repo, "sha": commit, "private": False,
                "gated": "manual" if self.token_sha256 else False, "siblings": siblings}

    def authorized(self, header: str | None) -> bool:
        """Whether a request may pass: always on an open repo, with the right bearer token on a gated one."""
        if self.token_sha256 is None:
            return True
        token = (header or "").removeprefix("Bearer ")
        return bool(header) and hashlib.sha256(token.encode()).hexdigest() == self.token_sha256

    def tree(self, revision: str) -> list[dict]:
        return [{"type": "file", "path": s["rfilename"], "size": s["size"], "oid": s["blobId"],
                 **({"lfs": {"oid": s["lfs"]["sha256"], "size": s["size"], "pointerSize": 130}} if "lfs" in s else {})}
                for s in self.info(revision)["siblings"]]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self
        repo = re.escape(self.repo)

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, head_only: bool) -> None:
                auth = self.headers.get("Authorization")
                hub.requests.append((self.command, self.path, auth))
                if not hub.authorized(auth):
                    self._send(401, b'{"error": "Access to this model is restricted."}',
                               {"X-Error-Code": "GatedRepo", "Content-Type": "application/json"}, head_only)
                    return
                path = self.path.split("?", 1)[0]
                api = re.fullmatch(rf"/api/models/{repo}/revision/([^/]+)", path)
                resolve = re.fullmatch(rf"/{repo}/resolve/([^/]+)/(.+)", path)
                tree = re.fullmatch(rf"/api/models/{repo}/tree/([^/]+)", path)
                if tree:
                    self._send(200, json.dumps(hub.tree(tree.group(1))).encode(),
                               {"Content-Type": "application/json"}, head_only)
                elif api:
                    self._send(200, json.dumps(hub.info(api.group(1))).encode(),
                               {"Content-Type": "application/json"}, head_only)
                elif resolve and resolve.group(2) in hub.files_at(resolve.group(1))[1]:
                    self._file(*hub.files_at(resolve.group(1)), resolve.group(2), head_only)
                else:
                    self._send(404, b'{"error": "not found"}', {"X-Error-Code": "EntryNotFound"}, head_only)

            def _file(self, commit: str, files: dict[str, bytes], name: str, head_only: bool) -> None:
                data = files[name]
                sha256, blob_id = hub.digests(name, data)
                etag = sha256 if name in hub.lfs else blob_id
                if name in hub.corrupt:
                    data = data[:-1] + bytes([data[-1] ^ 0xFF])
                headers = {"X-Repo-Commit": commit, "ETag": f'"{etag}"', "Accept-Ranges": "bytes"}
                match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
                if match and not head_only:
                    start = int(match.group(1))
                    headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                    self._send(206, memoryview(data)[start:], headers, head_only, slow=True)
                else:
                    self._send(200, memoryview(data), headers, head_only, slow=True)

            def _send(self, status: int, body: bytes | memoryview, headers: dict[str, str], head_only: bool,
                      slow: bool = False) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if head_only:
                    return
                if not (slow and hub.rate):
                    self.wfile.write(body)
                    return
                started = time.monotonic()
                for offset in range(0, len(body), SEND_CHUNK):
                    self.wfile.write(body[offset:offset + SEND_CHUNK])
                    # Sleep until the bytes sent so far match the rate: a steady, watchable download.
                    time.sleep(max(0.0, started + (offset + SEND_CHUNK) / hub.rate - time.monotonic()))

            def do_GET(self) -> None:  # noqa: N802 - name fixed by http.server
                self._answer(head_only=False)

            def do_HEAD(self) -> None:  # noqa: N802 - name fixed by http.server
                self._answer(head_only=True)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - signature fixed
                pass

        return Handler

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def __enter__(self) -> StandInHub:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, by its path relative to it: one revision's content."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def main(argv: list[str] | None = None) -> None:
    """Serve the files of ``--dir`` as revision ``--revision`` of ``--repo`` on 127.0.0.1:``--port``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="the revision's files")
    parser.add_argument("--repo", default=REPO)
    parser.add_argument("--revision", default="main")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--lfs", action="append", default=[], help="glob of the files stored in LFS")
    parser.add_argument("--token-sha256", help="serve as a gated repo: only this token's bearer passes")
    parser.add_argument("--rate", type=float, help="file bodies at this many bytes per second")
    args = parser.parse_args(argv)
    files = files_of(args.dir)
    lfs = {name for name in files if any(fnmatch.fnmatch(name, pattern) for pattern in args.lfs)}
    StandInHub({args.revision: files}, lfs, repo=args.repo, token_sha256=args.token_sha256, rate=args.rate,
               port=args.port).serve_forever()


if __name__ == "__main__":
    main()
