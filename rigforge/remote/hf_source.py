"""The huggingface source of ``weights_tool.py hf-download``: a pinned revision, verified, then moved into place.

Runs on the rig inside the venv that holds huggingface_hub. The token is read from an env file
(``HF_TOKEN=...``, mode 0600) and handed to the library in-process: never on a command line, never printed.

Steps: ask the hub for the revision's file list (sizes, LFS sha256, git blob ids); keep the files the
manifest already records unchanged; check disk space for the rest; download them into a staging folder
(huggingface_hub resumes interrupted files there); check each one (sha256 for LFS files, the git blob id
for small ones); move it into place and record it. Files the revision no longer has are removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from weights_tool import (
    CHUNK,
    WeightsError,
    forget_file,
    free_bytes,
    read_manifest,
    record_file,
    sha256_file,
    space_problem,
    write_manifest,
)

STAGING_NAME = ".rigforge-incoming"


@dataclass(frozen=True)
class RemoteFile:
    """One file of the pinned revision as the hub describes it."""

    name: str
    size: int
    sha256: str | None  # LFS files
    blob_id: str | None  # git object id (sha1) of small, non-LFS files


def read_token(token_file: str | None) -> str | None:
    """``HF_TOKEN`` from an env file that only its owner can read; None without a file."""
    if not token_file or not os.path.exists(token_file):
        return None
    if stat.S_IMODE(os.stat(token_file).st_mode) & 0o077:
        raise WeightsError(f"{token_file} must be readable by its owner only (mode 0600)")
    with open(token_file, encoding="utf-8") as handle:
        for line in handle:
            name, sep, value = line.strip().partition("=")
            if sep and name.strip() == "HF_TOKEN":
                return value.strip().strip("'\"") or None
    return None


def git_blob_sha1(path: str) -> str:
    """The git object id of a file (``sha1("blob <size>\\0" + content)``), as the hub reports for non-LFS files."""
    digest = hashlib.sha1(f"blob {os.path.getsize(path)}\0".encode())  # noqa: S324 - git's own scheme
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def remote_files(siblings: Iterable[Any], allow_patterns: Sequence[str]) -> list[RemoteFile]:
    """The revision's files that match ``allow_patterns`` (all when empty), with what checks them."""
    from huggingface_hub.utils import filter_repo_objects

    chosen = filter_repo_objects(list(siblings), allow_patterns=list(allow_patterns) or None,
                                 key=lambda sibling: sibling.rfilename)
    files = []
    for sibling in chosen:
        lfs = sibling.lfs
        files.append(RemoteFile(
            name=sibling.rfilename,
            size=int(lfs["size"] if lfs else sibling.size or 0),
            sha256=lfs["sha256"] if lfs else None,
            blob_id=None if lfs else sibling.blob_id,
        ))
    return files


def is_current(directory: str, remote: RemoteFile, entry: dict[str, Any] | None) -> bool:
    """The recorded file is still on disk unchanged and is the revision's content."""
    if entry is None:
        return False
    try:
        disk = os.stat(os.path.join(directory, remote.name))
    except FileNotFoundError:
        return False
    same_disk = disk.st_size == entry["size"] == remote.size and disk.st_mtime_ns == entry["mtime_ns"]
    same_content = entry["sha256"] == remote.sha256 if remote.sha256 else entry.get("blob_id") == remote.blob_id
    return same_disk and same_content


def check_staged(path: str, remote: RemoteFile) -> str:
    """Verify a downloaded file; return its sha256 (computed once) or raise after deleting it."""
    problem = None
    if os.path.getsize(path) != remote.size:
        problem = f"size is {os.path.getsize(path)} bytes, expected {remote.size}"
    elif remote.blob_id and git_blob_sha1(path) != remote.blob_id:
        problem = f"git blob id differs from {remote.blob_id}"
    digest = sha256_file(path) if problem is None else ""
    if problem is None and remote.sha256 and digest != remote.sha256:
        problem = f"sha256 is {digest}, expected {remote.sha256}"
    if problem:
        os.unlink(path)
        raise WeightsError(f"{remote.name}: {problem}; deleted the download, the next run fetches it again")
    return digest


def hf_size(repo: str, revision: str, allow: Sequence[str], token_file: str | None,
            endpoint: str | None = None) -> str:
    """The revision's real size as the hub lists it: one JSON line {"bytes", "files", "commit"} of the files
    matching ``allow`` (what the disk checks expect in place of a profile's ``size_gb``)."""
    from huggingface_hub import HfApi

    info = HfApi(endpoint=endpoint).model_info(repo, revision=revision, files_metadata=True,
                                               token=read_token(token_file))
    wanted = remote_files(info.siblings or [], allow)
    return json.dumps({"bytes": sum(remote.size for remote in wanted), "files": len(wanted), "commit": info.sha})


def hf_download(directory: str, repo: str, revision: str, allow: Sequence[str], token_file: str | None,
                endpoint: str | None = None) -> str:
    """Bring ``directory`` to ``repo@revision`` (files matching ``allow``); return a one-line summary.

    ``endpoint`` is the Hub's address (a site's proxy or mirror); None keeps huggingface_hub's default.
    """
    from huggingface_hub import HfApi, snapshot_download

    token = read_token(token_file)
    info = HfApi(endpoint=endpoint).model_info(repo, revision=revision, files_metadata=True, token=token)
    wanted = remote_files(info.siblings or [], allow)
    if not wanted:
        raise WeightsError(f"{repo}@{revision} has no files matching {list(allow)}")
    os.makedirs(directory, exist_ok=True)
    recorded = {entry["name"]: entry for entry in read_manifest(directory)["files"]}
    todo = [remote for remote in wanted if not is_current(directory, remote, recorded.get(remote.name))]
    staging = os.path.join(directory, STAGING_NAME)
    need = sum(remote.size for remote in todo) - _tree_size(staging)
    problem = space_problem(directory, need, free_bytes(directory))
    if problem:
        raise WeightsError(problem)
    print(f"{repo}@{revision} ({info.sha}): {len(wanted)} file(s), {len(todo)} to download, "
          f"{sum(r.size for r in todo) / 1e9:.1f} GB", flush=True)
    if todo:
        snapshot_download(repo, revision=info.sha, local_dir=staging, token=token, endpoint=endpoint,
                          allow_patterns=[remote.name for remote in todo])
    for remote in todo:
        staged = os.path.join(staging, remote.name)
        digest = check_staged(staged, remote)
        final = os.path.join(directory, remote.name)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        os.replace(staged, final)
        record_file(directory, remote.name, digest, "huggingface", repo, revision, allow)
        _remember_blob_id(directory, remote)
    _drop_unwanted(directory, {remote.name for remote in wanted}, repo, revision, allow)
    shutil.rmtree(staging, ignore_errors=True)
    return f"{repo}@{revision}: {len(wanted)} file(s) in place, {len(todo)} downloaded and verified"


def _remember_blob_id(directory: str, remote: RemoteFile) -> None:
    if remote.blob_id is None:
        return
    manifest = read_manifest(directory)
    for entry in manifest["files"]:
        if entry["name"] == remote.name:
            entry["blob_id"] = remote.blob_id
    write_manifest(directory, manifest)


def _drop_unwanted(directory: str, wanted: set[str], repo: str, revision: str, allow: Sequence[str]) -> None:
    manifest = read_manifest(directory)
    for entry in list(manifest["files"]):
        if entry["name"] not in wanted:
            forget_file(directory, entry["name"])
    manifest = read_manifest(directory)
    manifest.update(source="huggingface", origin=repo, revision=revision, allow_patterns=list(allow))
    write_manifest(directory, manifest)


def _tree_size(path: str) -> int:
    total = 0
    for root, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return total
