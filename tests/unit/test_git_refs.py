"""Git refs of image builds resolved with real ``git ls-remote``: the command the rig runs, its parser, one line
when a ref does not resolve.

The repositories are real git repositories made in a temporary folder (a branch, an annotated and a lightweight
tag); the command is the one the ``GitRemoteRefs`` fact sends to a rig, run here with this machine's git.
tests/fixtures/images/ls-remote-annotated-tag.txt is its output captured once on such a repository (how: its
README).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rigforge.facts.images import GitRemoteRefs
from rigforge.images.git_refs import (
    NO_GIT,
    GitRef,
    LsRemote,
    UnresolvedRef,
    commit_of,
    ls_remote_here,
    parse_ls_remote_output,
    resolve,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "images"


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), "-c", "user.email=t@example.org", "-c", "user.name=t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture()
def repository(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A repository with main at its second commit, an annotated tag v1 and a lightweight tag v0 on the first."""
    folder = tmp_path / "source"
    subprocess.run(["git", "init", "-q", "-b", "main", str(folder)], check=True)
    git(folder, "commit", "-q", "--allow-empty", "-m", "one")
    first = git(folder, "rev-parse", "HEAD")
    git(folder, "tag", "-a", "v1", "-m", "release 1")
    git(folder, "tag", "v0")
    git(folder, "commit", "-q", "--allow-empty", "-m", "two")
    main, tag_object = git(folder, "rev-parse", "HEAD"), git(folder, "rev-parse", "v1")
    return folder, {"first": first, "main": main, "v1-object": tag_object}


def rig_ls_remote(repository: str, names: list[str], path: str | None = None) -> LsRemote:
    """The fact's command run here as a rig runs it (``path``: a PATH without git)."""
    env = {"PATH": path} if path is not None else None
    command = GitRemoteRefs().command(repository=repository, names=names)
    proc = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env=env, check=True)
    return GitRemoteRefs().process(proc.stdout.splitlines())


def test_a_branch_and_tags_resolve_to_their_commits(repository: tuple[Path, dict[str, str]]) -> None:
    folder, commits = repository
    listing = rig_ls_remote(str(folder), ["main", "v1", "v0"])
    assert listing.git and listing.status == 0
    assert commit_of(listing.refs, "main") == commits["main"]
    # An annotated tag is a tag object: git lists its commit only when asked for v1^{}, which the command does.
    assert commit_of(listing.refs, "v1") == commits["first"] != commits["v1-object"]
    assert commit_of(listing.refs, "v0") == commits["first"]
    refs = [GitRef("SOURCE_REF", str(folder), "v1", None), GitRef("OTHER_REF", str(folder), "main", None)]
    assert resolve(refs, {str(folder): listing}, "on rig-a") == {"SOURCE_REF": commits["first"],
                                                                  "OTHER_REF": commits["main"]}


def test_the_captured_output_parses() -> None:
    listing = parse_ls_remote_output((FIXTURES / "ls-remote-annotated-tag.txt").read_text().splitlines())
    assert listing.git and listing.status == 0 and not listing.errors
    assert commit_of(listing.refs, "v1") == listing.refs["refs/tags/v1^{}"] != listing.refs["refs/tags/v1"]
    assert commit_of(listing.refs, "main") == listing.refs["refs/heads/main"]


def test_a_ref_that_does_not_resolve_is_one_line_naming_ref_and_repository(
        repository: tuple[Path, dict[str, str]]) -> None:
    folder, _ = repository
    listing = rig_ls_remote(str(folder), ["blackwell-cu13"])
    with pytest.raises(UnresolvedRef) as caught:
        resolve([GitRef("SGLANG_REF", str(folder), "blackwell-cu13", None)], {str(folder): listing}, "on rig-a")
    line = str(caught.value)
    assert "\n" not in line
    assert line == (f"engine.build.args.SGLANG_REF: 'blackwell-cu13' does not resolve in {folder} (git ls-remote on "
                    "rig-a lists no branch or tag of that name); name an existing branch or tag, or pin a commit "
                    "(40 hex digits)")


def test_a_repository_git_cannot_read_is_one_line_with_gits_reason(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-repository")
    listing = rig_ls_remote(missing, ["main"])
    assert listing.status != 0
    with pytest.raises(UnresolvedRef) as caught:
        resolve([GitRef("VLLM_REF", missing, "main", None)], {missing: listing}, "on rig-a")
    line = str(caught.value)
    assert "\n" not in line and line.startswith(f"engine.build.args.VLLM_REF: 'main' could not be resolved: git "
                                                f"ls-remote {missing} failed on rig-a: ")
    assert "does not appear to be a git repository" in line or "not found" in line


def test_a_pinned_commit_is_not_asked_for(repository: tuple[Path, dict[str, str]]) -> None:
    folder, commits = repository
    pinned = GitRef("SOURCE_REF", str(folder), commits["first"], None)
    assert pinned.pinned and resolve([pinned], {}, "on rig-a") == {"SOURCE_REF": commits["first"]}


def test_a_rig_without_git_says_so_and_this_machine_resolves(repository: tuple[Path, dict[str, str]],
                                                              tmp_path: Path) -> None:
    folder, commits = repository
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("timeout", "echo"):
        (bare / tool).symlink_to(subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True, text=True,
                                                check=True).stdout.strip())
    assert rig_ls_remote(str(folder), ["main"], path=str(bare)) == LsRemote(False, 0, {}, ())
    assert parse_ls_remote_output([NO_GIT]).git is False
    here = ls_remote_here(str(folder), ["main"])
    assert here.git and commit_of(here.refs, "main") == commits["main"]
