"""The model weights on a rig: their manifest, the files on disk (sizes and mtimes only) and free space.

The manifest (``<model.path>/.rigforge-manifest.json``, written by ``rigforge/remote/weights_tool.py``)
records each file's size, mtime and sha256, hashed once when the file arrived. A file whose size and
mtime still match its entry is trusted without reading it, so checking 200 GB of weights costs one
``find``; only the explicit verify run re-hashes.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from pyinfra.api import FactBase

from rigforge.reads.parsing import split_sections

MANIFEST_NAME = ".rigforge-manifest.json"
#: Where the huggingface source stages a download before it is verified and moved into place.
STAGING_NAME = ".rigforge-incoming"
PART_SUFFIX = ".part"

_DF_LINE = re.compile(r"^(?P<fs>.*?)\s+(?P<total>\d+)\s+(?P<used>\d+)\s+(?P<avail>\d+)\s+\d+%\s+(?P<mount>.+)$")


@dataclass(frozen=True)
class ManifestEntry:
    """One completed file as it was when its sha256 was computed."""

    name: str
    size: int
    sha256: str
    mtime_ns: int


@dataclass(frozen=True)
class Manifest:
    """What the weights at a path are and where they came from."""

    source: str
    origin: str
    revision: str | None
    allow_patterns: tuple[str, ...]
    files: tuple[ManifestEntry, ...]

    def entry(self, name: str) -> ManifestEntry | None:
        return next((entry for entry in self.files if entry.name == name), None)


@dataclass(frozen=True)
class DiskFile:
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class WeightsState:
    """The manifest (None when absent or unreadable), files on disk by relative path, free space.

    + free_bytes / free_path: space available to unprivileged writes on the filesystem holding the
      model path (or its nearest existing parent), and that filesystem's mount point
    """

    manifest: Manifest | None
    files: dict[str, DiskFile] = field(default_factory=dict)
    free_bytes: int = 0
    free_path: str = ""

    def verified(self, name: str, sha256: str | None = None) -> bool:
        """The file is recorded in the manifest (with ``sha256`` when given) and unchanged on disk since."""
        entry = self.manifest.entry(name) if self.manifest else None
        disk = self.files.get(name)
        if entry is None or disk is None or (sha256 is not None and entry.sha256 != sha256):
            return False
        return entry.size == disk.size and entry.mtime_ns == disk.mtime_ns

    def part_size(self, name: str) -> int:
        """Bytes already in ``<name>.part`` (an interrupted transfer), 0 when there is none."""
        part = self.files.get(name + PART_SUFFIX)
        return part.size if part else 0

    def all_recorded_verified(self) -> bool:
        """Every file in the manifest is still on disk as recorded (and there is at least one)."""
        return bool(self.manifest and self.manifest.files) and all(
            self.verified(entry.name) for entry in self.manifest.files  # type: ignore[union-attr]
        )


def find_time_to_ns(text: str) -> int:
    """Turn ``find -printf %T@`` (``1732243200.1234567890``) into integer nanoseconds, without floats.

    >>> find_time_to_ns("1732243200.123456789")
    1732243200123456789
    """
    seconds, _, fraction = text.partition(".")
    return int(seconds) * 1_000_000_000 + int((fraction + "000000000")[:9])


def parse_manifest(text: str) -> Manifest | None:
    """Parse the manifest JSON; None when it is missing, truncated or not a rigforge manifest."""
    try:
        data: Any = json.loads(text)
        files = tuple(
            ManifestEntry(str(f["name"]), int(f["size"]), str(f["sha256"]), int(f["mtime_ns"]))
            for f in data["files"]
        )
        return Manifest(
            source=str(data["source"]),
            origin=str(data.get("origin") or ""),
            revision=data.get("revision"),
            allow_patterns=tuple(data.get("allow_patterns") or ()),
            files=files,
        )
    except (ValueError, KeyError, TypeError):
        return None


def parse_file_list(text: str) -> dict[str, DiskFile]:
    """Parse ``find -printf '%s %T@ %P\\n'`` lines into {relative path: DiskFile}."""
    files: dict[str, DiskFile] = {}
    for line in text.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0].isdigit():
            files[parts[2]] = DiskFile(int(parts[0]), find_time_to_ns(parts[1]))
    return files


def parse_df(text: str) -> tuple[int, str]:
    """Parse the data line of ``df -P -B1 PATH`` into (available bytes, mount point); (0, "") if absent."""
    for line in reversed(text.splitlines()):
        match = _DF_LINE.match(line.strip())
        if match:
            return int(match["avail"]), match["mount"]
    return 0, ""


def parse_weights_state(text: str) -> WeightsState:
    """Parse the sectioned output of the ``WeightsOnDisk`` command."""
    sections = split_sections(text)
    free_bytes, free_path = parse_df(sections.get("free", ""))
    return WeightsState(
        manifest=parse_manifest(sections.get("manifest", "").strip() or "null"),
        files=parse_file_list(sections.get("files", "")),
        free_bytes=free_bytes,
        free_path=free_path,
    )


class WeightsOnDisk(FactBase[WeightsState]):
    """
    Returns the ``WeightsState`` of a model folder: manifest, files (size + mtime, never contents) and
    the free space of its filesystem. A folder that does not exist yet gives an empty state with the free
    space of its nearest existing parent.

    .. code:: python

        state = host.get_fact(WeightsOnDisk, path="/srv/models/qwen")
        if not state.verified("model.gguf", sha256):
            ...
    """

    def command(self, path: str) -> str:
        d = shlex.quote(path.rstrip("/") or "/")
        return (
            f"d={d}; echo '## manifest'; cat \"$d/{MANIFEST_NAME}\" 2>/dev/null; echo; echo '## files'; "
            f"[ -d \"$d\" ] && find \"$d\" -path \"$d/{STAGING_NAME}\" -prune -o -type f "
            f"! -name {MANIFEST_NAME} -printf '%s %T@ %P\\n' 2>/dev/null; "
            "echo '## free'; p=\"$d\"; while [ ! -d \"$p\" ]; do p=$(dirname \"$p\"); done; "
            "df -P -B1 \"$p\" 2>/dev/null | tail -n 1"
        )

    @staticmethod
    def default() -> WeightsState:
        return WeightsState(manifest=None)

    def process(self, output: list[str]) -> WeightsState:
        return parse_weights_state("\n".join(output))


@dataclass(frozen=True)
class HubSize:
    """A revision's size as the hub lists it, or why it is not known.

    + size: bytes of the wanted files; None when the hub was not asked or did not answer
    + said: where the number comes from, or why there is none, in words
    """

    size: int | None
    said: str


def parse_hub_size(text: str) -> HubSize:
    """The fact's output: ``repo@revision`` on the first line, then the tool's JSON line or a line saying why
    the hub was not asked or did not answer.

    >>> parse_hub_size('org/m@main\\n{"bytes": 5, "files": 2, "commit": "0123456789abcdef"}').said
    "the hub's file list of org/m@main (0123456789ab: 2 file(s))"
    """
    lines = [line for line in text.splitlines() if line.strip()]
    where, answers = (lines[0], lines[1:]) if lines else ("the revision", [])
    try:
        answer = json.loads(answers[-1]) if answers else {}
    except json.JSONDecodeError:
        answer = {}
    if isinstance(answer, dict) and isinstance(answer.get("bytes"), int):
        commit = str(answer.get("commit") or "")[:12]
        return HubSize(answer["bytes"], f"the hub's file list of {where} ({commit}: {answer.get('files')} file(s))")
    why = answers[-1][:200] if answers else "no answer"
    return HubSize(None, f"the profile's model.size_gb (the hub's file list of {where} is not known: {why})")


class HubRevisionSize(FactBase[HubSize]):
    """
    Returns the ``HubSize`` of a pinned revision's wanted files, asked on the rig with the weights tool's
    ``hf-size`` (in the huggingface_hub venv, with the rig's token); a rig without that venv yet, or a hub that
    does not answer, gives None with the reason.

    .. code:: python

        hub = host.get_fact(HubRevisionSize, python=HF_PYTHON, tool=TOOL, repo="org/model", revision="abc",
                            allow=["*.safetensors"], token_file=TOKEN, endpoint=None)
    """

    def command(self, python: str, tool: str, repo: str, revision: str, allow: list[str], token_file: str,
                endpoint: str | None = None) -> str:
        words = [python, tool, "hf-size", "--repo", repo, "--revision", revision, "--token-file", token_file]
        for pattern in allow:
            words += ["--allow", pattern]
        if endpoint:
            words += ["--endpoint", endpoint]
        quoted = " ".join(shlex.quote(word) for word in words)
        return (f"echo {shlex.quote(f'{repo}@{revision}')}; "
                f"if [ -x {shlex.quote(python)} ] && [ -f {shlex.quote(tool)} ]; then timeout 60 {quoted} 2>&1 "
                "| tail -n 1; else echo 'the Hugging Face client is not installed on the rig yet'; fi; true")

    def process(self, output: list[str]) -> HubSize:
        return parse_hub_size("\n".join(output))
