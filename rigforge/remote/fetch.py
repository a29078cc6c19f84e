"""Download a URL to a file: resumable, size- and sha256-verified, renamed into place only when right.

Usage:
    python3 fetch.py URL DEST [--sha256 HEX] [--size BYTES] [--header-file FILE] [--retries N]

Bytes go to ``DEST.part``. When it exists the download resumes with ``Range: bytes=N-``; the server
must answer 206 with a matching Content-Range, and a plain 200 restarts from zero. A dropped
connection is retried (resuming) up to ``--retries`` times. When all bytes are there the size and
sha256 (when given) are checked, the file is fsynced and renamed to DEST; content that fails the
check is deleted, so DEST only ever holds verified bytes. A DEST that is already there and matches
is left alone. Progress (percent, MB/s) goes to stderr every few seconds, then a one-line summary.

``--header-file`` holds extra request headers, one ``Name: value`` a line (for example
``Authorization: Bearer ...``). It must not be readable by group or others (mode 0600). Its values
are never printed, and they are only sent again after a redirect that stays on the same host.

Exit codes: 0 done (or already present), 1 download or verification failed, 2 bad input.

Example:
    python3 fetch.py https://example.org/model.safetensors /srv/model.safetensors --sha256 3b1f...9a
"""

from __future__ import annotations

import argparse
import email.message
import hashlib
import http.client
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

CHUNK = 1 << 20
MB = 1e6
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
PERMANENT_HTTP_ERRORS = {400, 401, 403, 404, 405, 410}


class FetchError(Exception):
    """The download failed; what is in DEST.part is kept, so a retry resumes."""


class VerifyError(FetchError):
    """The downloaded bytes are wrong; DEST.part has been deleted."""


class InputError(Exception):
    """Unusable arguments or header file (exit code 2)."""


@dataclass
class FetchResult:
    dest: str
    size: int
    sha256: str | None  # hex digest when one was computed (always while downloading)
    seconds: float
    resumed_from: int  # bytes already in DEST.part when this call started
    downloaded: bool  # False when DEST was already present and matched


def sha256_file(path: str, chunk: int = CHUNK) -> str:
    """Hex sha256 of a file, read in chunks so huge files need little memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def read_header_file(path: str) -> dict[str, str]:
    """Parse ``Name: value`` lines; refuse files that group or others can read."""
    try:
        mode = os.stat(path).st_mode
        with open(path, encoding="utf-8") as handle:
            lines = handle.readlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read header file {path}: {error}") from error
    if mode & 0o077:
        raise InputError(f"header file {path} has mode {oct(mode & 0o777)}; it must be 0600")
    headers: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, colon, value = line.partition(":")
        if not colon or not re.fullmatch(r"[A-Za-z0-9-]+", name.strip()):
            # the line itself may hold a secret, so only its number is named
            raise InputError(f"header file {path}: line {number} is not 'Name: value'")
        headers[name.strip()] = value.strip()
    return headers


class SameHostRedirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects, re-sending the secret headers only while scheme and host stay the same."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: email.message.Message,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        secrets: dict[str, str] = getattr(req, "secret_headers", {})
        if new is not None and _origin(new.full_url) == _origin(req.full_url):
            new.secret_headers = secrets  # type: ignore[attr-defined]
            for name, value in secrets.items():
                new.add_unredirected_header(name, value)
        return new


def _origin(url: str) -> tuple[str, str]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, parts.netloc.lower()


def open_url(url: str, offset: int, secrets: dict[str, str], timeout: float) -> http.client.HTTPResponse:
    """GET ``url`` from byte ``offset``; secret headers are kept off redirects to other hosts."""
    request = urllib.request.Request(url, headers={"User-Agent": "rigforge-fetch"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    request.secret_headers = secrets  # type: ignore[attr-defined]
    for name, value in secrets.items():
        request.add_unredirected_header(name, value)
    return urllib.request.build_opener(SameHostRedirects).open(request, timeout=timeout)


def range_start_and_total(content_range: str | None) -> tuple[int | None, int | None]:
    """Parse ``bytes START-END/TOTAL`` or ``bytes */TOTAL`` into (START, TOTAL); None where absent."""
    match = re.fullmatch(r"bytes (?:(\d+)-\d+|\*)/(\d+|\*)", (content_range or "").strip())
    if not match:
        return None, None
    start, total = match.groups()
    return (int(start) if start else None), (int(total) if total != "*" else None)


class Progress:
    """Prints percent and MB/s to stderr at most every ``every`` seconds."""

    def __init__(self, name: str, total: int | None, start: int, every: float) -> None:
        self.name, self.total, self.start, self.every = name, total, start, every
        self.began = self.last = time.monotonic()

    def update(self, done: int) -> None:
        now = time.monotonic()
        if now - self.last < self.every:
            return
        self.last = now
        rate = (done - self.start) / MB / max(now - self.began, 1e-6)
        share = f"{100 * done / self.total:5.1f}% of {self.total / MB:.1f} MB" if self.total else "? %"
        print(f"{self.name}: {share}, {done / MB:.1f} MB, {rate:.1f} MB/s", file=sys.stderr, flush=True)


def download_once(url: str, part: str, secrets: dict[str, str], size: int | None, every: float) -> str:
    """Fill ``part`` to the end (resuming when it has bytes); return the sha256 of all of it."""
    offset = os.path.getsize(part) if os.path.exists(part) else 0
    if size is not None and offset > size:
        offset = 0  # longer than the file can be: nothing in it is trustworthy
    if size is not None and offset == size:
        return sha256_file(part)  # every byte arrived before the last run stopped
    try:
        response = open_url(url, offset, secrets, timeout=60)
    except urllib.error.HTTPError as error:
        if error.code == 416 and range_start_and_total(error.headers.get("Content-Range"))[1] == offset:
            return sha256_file(part)  # every byte is already here
        if error.code == 416:
            os.truncate(part, 0)
        raise FetchError(f"HTTP {error.code} {error.reason}") from error
    with response:
        start, total = range_start_and_total(response.headers.get("Content-Range"))
        if response.status == 206 and start != offset:
            os.truncate(part, 0)  # the next try asks for everything
            raise FetchError(f"asked for bytes from {offset}, server sent a range from {start}")
        if response.status != 206:
            if offset:
                print(f"{os.path.basename(part)}: server did not resume; restarting", file=sys.stderr)
            offset, total = 0, None
        length = response.headers.get("Content-Length")
        if total is None and length is not None:
            total = offset + int(length)
        if size is not None and total is not None and total != size:
            raise VerifyError(f"server has {total} bytes, expected {size}")
        return copy_body(response, part, offset, total, Progress(os.path.basename(part), total, offset, every))


def copy_body(response: http.client.HTTPResponse, part: str, offset: int, total: int | None, progress: Progress) -> str:
    """Append the response body to ``part`` (truncated to ``offset``); return the sha256 of the whole."""
    digest = hashlib.sha256()
    if offset:
        with open(part, "rb") as existing:
            for block in iter(lambda: existing.read(CHUNK), b""):
                digest.update(block)
    with open(part, "r+b" if offset else "wb", buffering=0) as out:
        # unbuffered, so bytes received before a kill are on disk for the next resume
        out.seek(offset)
        out.truncate()
        done = offset
        for block in iter(lambda: response.read1(CHUNK), b""):
            out.write(block)
            digest.update(block)
            done += len(block)
            progress.update(done)
        os.fsync(out.fileno())
    if total is not None and done < total:
        raise FetchError(f"connection closed after {done} of {total} bytes")
    return digest.hexdigest()


def verify_and_install(part: str, dest: str, digest: str, sha256: str | None, size: int | None) -> None:
    """Check the finished ``part``; rename it to ``dest`` if right, delete it if wrong."""
    actual_size = os.path.getsize(part)
    problem = None
    if size is not None and actual_size != size:
        problem = f"size is {actual_size} bytes, expected {size}"
    elif sha256 is not None and digest != sha256.lower():
        problem = f"sha256 is {digest}, expected {sha256.lower()}"
    if problem:
        os.unlink(part)
        raise VerifyError(f"{os.path.basename(dest)}: {problem}; deleted the download")
    os.replace(part, dest)
    directory = os.open(os.path.dirname(os.path.abspath(dest)), os.O_RDONLY)
    try:
        os.fsync(directory)  # make the rename itself survive a power loss
    finally:
        os.close(directory)


def already_present(dest: str, sha256: str | None, size: int | None) -> str | None:
    """Digest (or "") when ``dest`` exists and matches what is asked for; None otherwise."""
    if not os.path.isfile(dest) or (size is not None and os.path.getsize(dest) != size):
        return None
    if sha256 is None:
        return ""
    digest = sha256_file(dest)
    return digest if digest == sha256.lower() else None


def fetch(
    url: str,
    dest: str,
    sha256: str | None = None,
    size: int | None = None,
    header_file: str | None = None,
    retries: int = 3,
    retry_wait: float = 2.0,
    progress_every: float = 5.0,
) -> FetchResult:
    """Download ``url`` to ``dest`` (see the module docstring); raise FetchError, VerifyError or InputError."""
    if sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):
        raise InputError("sha256 must be 64 hex digits")
    secrets = read_header_file(header_file) if header_file else {}
    began, name, part = time.monotonic(), os.path.basename(dest), dest + ".part"
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    present = already_present(dest, sha256, size)
    if present is not None:
        print(f"{name}: already present{', sha256 ok' if present else ''}; nothing to do", file=sys.stderr)
        return FetchResult(dest, os.path.getsize(dest), present or None, 0.0, 0, False)
    resumed_from = os.path.getsize(part) if os.path.exists(part) else 0
    for attempt in range(retries + 1):
        try:
            digest = download_once(url, part, secrets, size, progress_every)
            break
        except VerifyError:
            if os.path.exists(part):
                os.unlink(part)
            raise
        except (FetchError, OSError, http.client.HTTPException) as error:
            permanent = isinstance(error.__cause__, urllib.error.HTTPError) and (
                error.__cause__.code in PERMANENT_HTTP_ERRORS
            )
            if permanent or attempt == retries:
                raise FetchError(f"{name}: {error}; {part} is kept for a resume") from error
            print(f"{name}: {error}; retry {attempt + 1} of {retries}", file=sys.stderr)
            time.sleep(retry_wait * (attempt + 1))
    verify_and_install(part, dest, digest, sha256, size)
    seconds = time.monotonic() - began
    total = os.path.getsize(dest)
    rate = (total - resumed_from) / MB / max(seconds, 1e-6)
    resumed = f", resumed at {resumed_from / MB:.1f} MB" if resumed_from else ""
    checked = ", sha256 ok" if sha256 else ""
    print(f"{name}: {total / MB:.1f} MB in {seconds:.1f} s ({rate:.1f} MB/s){resumed}{checked}", file=sys.stderr)
    return FetchResult(dest, total, digest, seconds, resumed_from, True)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit code documented in the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("dest")
    parser.add_argument("--sha256", help="expected sha256 (hex)")
    parser.add_argument("--size", type=int, help="expected size in bytes")
    parser.add_argument("--header-file", help="file of 'Name: value' request headers, mode 0600")
    parser.add_argument("--retries", type=int, default=3, help="resumed retries after a dropped connection")
    args = parser.parse_args(argv)
    try:
        fetch(args.url, args.dest, args.sha256, args.size, args.header_file, args.retries)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (FetchError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
