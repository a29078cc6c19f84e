"""Facts of engine image builds: the rig's record of what a build request's git refs resolved to, and what a
repository's refs point at now (``git ls-remote`` on the rig).

The record is read on every run (a converged rig's no-op reads it with the read-ahead, in one round trip); the
repository is asked only when an image is to be resolved afresh, and never read ahead
(rigforge/reads/read_ahead.py leaves out facts with ``read_ahead = False``): a no-op run sends no ``ls-remote``.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from pyinfra.api import FactBase

from rigforge.images.git_refs import LsRemote, is_commit, ls_remote_command, parse_ls_remote_output


@dataclass(frozen=True)
class ImageRecord:
    """What a build request's refs resolved to on this rig (or were taken from another rig of its fleet).

    + request_hash: the build request (refs as the profile names them)
    + tag: the image built from those commits
    + commits: build arg -> commit
    + refs: build arg -> {repository, ref, commit}, as recorded
    + resolved_on / resolved_at: the rig that ran ``git ls-remote`` (or the controller) and when (UTC)
    """

    request_hash: str
    tag: str
    commits: dict[str, str]
    refs: dict[str, dict[str, Any]]
    resolved_on: str
    resolved_at: str


def parse_image_record(text: str) -> ImageRecord | None:
    """A record file's text; None for a file that is not one (read as no record: the refs are resolved again)."""
    try:
        data = json.loads(text)
        refs = {str(arg): dict(entry) for arg, entry in (data.get("git_refs") or {}).items()}
        commits = {arg: str(entry["commit"]) for arg, entry in refs.items()}
        record = ImageRecord(str(data["request_hash"]), str(data["tag"]), commits, refs,
                             str(data.get("resolved_on", "")), str(data.get("resolved_at", "")))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return record if all(is_commit(commit) for commit in commits.values()) else None


class ImageRecordFile(FactBase[ImageRecord | None]):
    """The rig's record at ``path`` (rigforge/images/plans.py ``BuildPlan.record_path``), None when there is none."""

    def command(self, path: str) -> str:
        return f"cat {shlex.quote(path)} 2>/dev/null || true"

    def process(self, output: list[str]) -> ImageRecord | None:
        return parse_image_record("\n".join(output))


class GitRemoteRefs(FactBase[LsRemote]):
    """``git ls-remote REPOSITORY NAME...`` on the rig: the commits those names point at now."""

    #: Asked only when a build is resolved; a record of it must never put it into the next run's read-ahead.
    read_ahead = False

    def command(self, repository: str, names: list[str]) -> str:
        return ls_remote_command(repository, names)

    def process(self, output: list[str]) -> LsRemote:
        return parse_ls_remote_output(output)


class DockerImageId(FactBase[str | None]):
    """The ID of a local image by reference (``sha256:…``), or None when there is none (or no CLI)."""

    def command(self, ref: str) -> str:
        return (f"command -v docker >/dev/null 2>&1 && docker image inspect --format '{{{{.Id}}}}' "
                f"{shlex.quote(ref)} 2>/dev/null || true")

    def process(self, output: list[str]) -> str | None:
        return next((line.strip() for line in output if line.strip()), None)
