"""Git refs in an image build: which build args name one, and the commit each resolves to.

A Dockerfile template declares its git checkouts (``git_sources``: build arg -> repository and path); those args
are git refs, and no other arg is (no guessing from names). Before a build, each ref the profile names (a branch,
a tag, ``main``) is resolved to its commit with ``git ls-remote`` on the rig; a 40-hex commit in the profile is
pinned and needs no resolution. The commit, not the name, is what the build checks out and what the tag hashes.

Example::

    refs = parse_ls_remote(["4f1c…\\trefs/heads/main"])
    commit_of(refs, "main")          # "4f1c…"
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
#: What the ls-remote command prints when the rig has no git (the controller's git resolves instead).
NO_GIT = "rigforge-no-git"
STATUS_PREFIX = "rigforge-ls-remote-status="
LS_REMOTE_TIMEOUT_S = 120


def is_commit(value: str) -> bool:
    """A full commit id (40 lowercase hex digits): pinned, nothing to resolve.

    >>> is_commit("a" * 40), is_commit("main"), is_commit("abc1234")
    (True, False, False)
    """
    return bool(_COMMIT.match(value))


@dataclass(frozen=True)
class GitSource:
    """A checkout a Dockerfile template makes: the build arg holding the ref, the repository, where it goes."""

    arg: str
    repository: str
    path: str


@dataclass(frozen=True)
class GitRef:
    """One git ref of a build: as the profile names it, and the commit it resolved to (None: not yet)."""

    arg: str
    repository: str
    ref: str
    commit: str | None

    @property
    def pinned(self) -> bool:
        return is_commit(self.ref)

    def record(self) -> dict[str, str | None]:
        return {"repository": self.repository, "ref": self.ref, "commit": self.commit}


class UnresolvedRef(ValueError):
    """A ref that names no branch or tag of its repository, or a repository git could not read."""


def parse_ls_remote(lines: Iterable[str]) -> dict[str, str]:
    """``git ls-remote`` output as ref name -> commit (peeled tags keep their ``^{}``).

    >>> parse_ls_remote(["a" * 40 + "\\trefs/tags/v1", "b" * 40 + "\\trefs/tags/v1^{}"])["refs/tags/v1^{}"][:4]
    'bbbb'
    """
    refs = {}
    for line in lines:
        commit, _, name = line.strip().partition("\t")
        if name and is_commit(commit):
            refs[name] = commit
    return refs


def commit_of(refs: Mapping[str, str], name: str) -> str | None:
    """The commit ``name`` means, in git's own order for a short name (``git rev-parse``): a full ref name, a tag
    (its commit when annotated), a branch; ``HEAD`` is the remote's default branch.

    >>> commit_of({"refs/heads/v1": "a" * 40, "refs/tags/v1": "b" * 40}, "v1")[:4]
    'bbbb'
    """
    for candidate in (f"{name}^{{}}", name, f"refs/{name}", f"refs/tags/{name}^{{}}", f"refs/tags/{name}",
                      f"refs/heads/{name}"):
        if candidate in refs:
            return refs[candidate]
    return None


def ls_remote_command(repository: str, names: Iterable[str]) -> str:
    """The shell command that lists ``names`` in ``repository`` on the rig, then its exit status.

    Each name is asked for as itself and as ``NAME^{}``: git lists an annotated tag's commit only when asked so.
    Never prompts (a private repository fails instead of waiting for a password); a rig without git says so.
    """
    words = " ".join(shlex.quote(pattern) for pattern in ls_remote_patterns(names))
    return (f"command -v git >/dev/null 2>&1 || {{ echo {NO_GIT}; exit 0; }}; "
            f"GIT_TERMINAL_PROMPT=0 timeout {LS_REMOTE_TIMEOUT_S} git ls-remote -- {shlex.quote(repository)} "
            f"{words} 2>&1; echo {STATUS_PREFIX}$?")


def ls_remote_patterns(names: Iterable[str]) -> list[str]:
    """The patterns that list each name and, for an annotated tag, its commit.

    >>> ls_remote_patterns(["v1", "main"])
    ['v1', 'v1^{}', 'main', 'main^{}']
    """
    return [pattern for name in names for pattern in (name, f"{name}^{{}}")]


@dataclass(frozen=True)
class LsRemote:
    """What ``ls_remote_command`` printed: the refs, git's exit status and its error lines."""

    git: bool
    status: int
    refs: dict[str, str]
    errors: tuple[str, ...]


def parse_ls_remote_output(lines: list[str]) -> LsRemote:
    if any(line.strip() == NO_GIT for line in lines):
        return LsRemote(False, 0, {}, ())
    status = next((int(line.strip()[len(STATUS_PREFIX):]) for line in lines
                   if line.strip().startswith(STATUS_PREFIX) and line.strip()[len(STATUS_PREFIX):].isdigit()), 1)
    errors = tuple(line.strip() for line in lines if line.strip() and "\t" not in line
                   and not line.strip().startswith(STATUS_PREFIX))
    return LsRemote(True, status, parse_ls_remote(lines), errors)


def ls_remote_here(repository: str, names: Iterable[str]) -> LsRemote:
    """``git ls-remote`` run on this machine (the controller): the fallback for a rig without git yet."""
    try:
        proc = subprocess.run(["git", "ls-remote", "--", repository, *ls_remote_patterns(names)], capture_output=True,
                              text=True,
                              timeout=LS_REMOTE_TIMEOUT_S, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
                              check=False)
    except FileNotFoundError:
        return LsRemote(False, 0, {}, ())
    except subprocess.TimeoutExpired:
        return LsRemote(True, 124, {}, (f"no answer within {LS_REMOTE_TIMEOUT_S} s",))
    lines = proc.stdout.splitlines()
    return LsRemote(True, proc.returncode, parse_ls_remote(lines), tuple(proc.stderr.strip().splitlines()))


def resolve(refs: Iterable[GitRef], listings: Mapping[str, LsRemote], where: str) -> dict[str, str]:
    """Each ref's commit from the ls-remote listing of its repository; one line naming ref and repository if not.

    + refs: the build's refs (pinned ones keep their commit)
    + listings: repository -> what ls-remote printed for it
    + where: who ran ls-remote, for the message (``on rig2x-a``)
    """
    commits = {}
    for ref in refs:
        if ref.pinned:
            commits[ref.arg] = ref.ref
            continue
        listing = listings[ref.repository]
        if listing.status != 0:
            # git's first fatal line says why; the lines after it are advice about access rights.
            detail = next((line for line in listing.errors if line.startswith(("fatal:", "error:"))),
                          listing.errors[-1] if listing.errors else f"exit status {listing.status}")
            raise UnresolvedRef(f"engine.build.args.{ref.arg}: {ref.ref!r} could not be resolved: git ls-remote "
                                f"{ref.repository} failed {where}: {detail}")
        commit = commit_of(listing.refs, ref.ref)
        if commit is None:
            raise UnresolvedRef(f"engine.build.args.{ref.arg}: {ref.ref!r} does not resolve in {ref.repository} "
                                f"(git ls-remote {where} lists no branch or tag of that name); name an existing branch "
                                "or tag, or pin a commit (40 hex digits)")
        commits[ref.arg] = commit
    return commits
