"""Resolved image builds: the tag hashes commits, not ref names; one resolution per run for the fleet.

The build plans are the real profiles' (rigforge/images/plans.py). The fleet's decisions
(rigforge/fleet/image_commits.py) are taken through pyinfra's own State and Inventory with three rigs whose facts are
given (FIXTURE: the hosts are never connected; each rig's record, image and ``git ls-remote`` answer are set per test,
and every ls-remote read is counted).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.host import Host

from rigforge.facts.images import DockerImageId, GitRemoteRefs, ImageRecord, ImageRecordFile, parse_image_record
from rigforge.fleet.image_commits import Resolution, record_document, resolve_for_host
from rigforge.images.git_refs import LsRemote
from rigforge.images.plans import ImagePlanError, build_plan
from rigforge.profile.loader import load_profile
from rigforge.render import render
from rigforge.serving.engines import image_commits, image_ref

OLD, NEW, OTHER = "1" * 40, "2" * 40, "3" * 40
SGLANG = "https://github.com/voipmonitor/sglang.git"
FLASHINFER = "https://github.com/flashinfer-ai/flashinfer.git"


def commits(sglang: str, flashinfer: str = OTHER) -> dict[str, str]:
    return {"SGLANG_REF": sglang, "FLASHINFER_REF": flashinfer}


def test_the_tag_changes_with_the_resolved_commit_not_with_the_ref_name() -> None:
    pix = load_profile("2x-pix")
    renamed = load_profile("2x-pix", {"engine": {"build": {"args": {"SGLANG_REF": "a-tag-on-the-same-commit"}}}})
    at_old, at_new = build_plan(pix, commits(OLD)), build_plan(pix, commits(NEW))
    renamed_at_old = build_plan(renamed, commits(OLD))
    assert at_old and at_new and renamed_at_old and at_old.resolved and at_new.resolved
    assert at_old.tag != at_new.tag  # the branch moved: another image
    assert renamed_at_old.tag == at_old.tag  # another name for the same commit: the same image
    assert renamed_at_old.request_hash != at_old.request_hash  # but another request: resolved and recorded anew
    assert at_old.request_hash == at_new.request_hash  # one request, two resolutions of it
    assert 'ARG SGLANG_REF="' + OLD + '"' in at_old.dockerfile and "blackwell-cu130" not in at_old.dockerfile
    assert f"org.rigforge.commit.SGLANG_REF={OLD}" in at_old.docker_build_arguments()
    assert f"SGLANG_REF={OLD}" in at_old.docker_build_arguments()


def test_an_unresolved_plan_is_not_the_image_and_a_pinned_one_needs_no_resolution() -> None:
    plan = build_plan(load_profile("2x-pix"))
    assert plan is not None and not plan.resolved and plan.commits == {}
    pinned = build_plan(load_profile("2x-pix", {"engine": {"build": {"args": commits(OLD)}}}))
    assert pinned is not None and pinned.resolved and pinned.commits == commits(OLD)
    assert pinned.tag == build_plan(load_profile("2x-pix"), commits(OLD)).tag  # type: ignore[union-attr]


def test_the_tag_does_not_depend_on_the_order_the_args_were_written_in() -> None:
    profile = load_profile("4x-threadripper")
    assert profile.engine.build is not None
    args = dict(reversed(list(profile.engine.build.args.items())))
    reordered = profile.model_copy(update={"engine": profile.engine.model_copy(
        update={"build": profile.engine.build.model_copy(update={"args": args})})})
    resolved = {"VLLM_REF": OLD, "CUTLASS_REF": NEW}
    assert build_plan(reordered, resolved).tag == build_plan(profile, resolved).tag  # type: ignore[union-attr]


def test_a_template_checkout_the_profile_gives_no_ref_for_is_refused() -> None:
    profile = load_profile("4x-threadripper")
    assert profile.engine.build is not None
    args = {key: value for key, value in profile.engine.build.args.items() if key != "VLLM_REF"}
    broken = profile.model_copy(update={"engine": profile.engine.model_copy(
        update={"build": profile.engine.build.model_copy(update={"args": args})})})
    with pytest.raises(ImagePlanError, match="VLLM_REF"):
        build_plan(broken)


def test_the_rigs_record_names_refs_commits_and_tag_and_reads_back() -> None:
    profile = load_profile("2x-pix")
    plan = build_plan(profile, commits(OLD))
    assert plan is not None
    text = render("images/image-record.json.j2", profile,
                  record=record_document(plan, Resolution(commits(OLD), "rig-a", "2026-11-26T10:00:00Z", "fresh")))
    record = parse_image_record(text)
    assert record == ImageRecord(plan.request_hash, plan.tag, commits(OLD), {
        "SGLANG_REF": {"repository": SGLANG, "ref": "blackwell-cu130", "commit": OLD},
        "FLASHINFER_REF": {"repository": FLASHINFER, "ref": "main", "commit": OTHER}}, "rig-a",
        "2026-11-26T10:00:00Z")
    assert json.loads(text)["_managed_by"].startswith("managed by rigforge")
    assert parse_image_record('{"request_hash": "x", "tag": "t", "git_refs": {"A": {"commit": "main"}}}') is None
    assert parse_image_record("not json") is None


def test_the_unit_names_the_image_at_the_commits_given() -> None:
    profile = load_profile("2x-pix")
    with image_commits(commits(NEW)):
        assert image_ref(profile) == build_plan(profile, commits(NEW)).tag  # type: ignore[union-attr]
    assert image_ref(profile) == build_plan(profile).tag  # type: ignore[union-attr]


class Rigs:
    """Three rigs of one run with given facts; counts the ls-remote reads (FIXTURE, see the module docstring)."""

    def __init__(self) -> None:
        self.state = State(Inventory((["rig-a", "rig-b", "rig-c"], {})), Config())
        self.hosts = {host.name: host for host in self.state.inventory}
        self.records: dict[str, ImageRecord] = {}
        self.images: set[tuple[str, str]] = set()
        self.listing = LsRemote(True, 0, {"refs/heads/blackwell-cu130": NEW, "refs/heads/main": OTHER}, ())
        self.asked: list[str] = []
        for host in self.hosts.values():
            self.state.activate_host(host)
            host.get_fact = self._facts(host)  # type: ignore[method-assign]

    def _facts(self, host: Host) -> Callable[..., object]:
        def get_fact(fact: type, **kwargs: object) -> object:
            if fact is ImageRecordFile:
                return self.records.get(host.name)
            if fact is DockerImageId:
                return "sha256:abc" if (host.name, kwargs["ref"]) in self.images else None
            assert fact is GitRemoteRefs
            self.asked.append(host.name)
            return self.listing
        return get_fact

    def record(self, name: str, resolved: dict[str, str], image: bool) -> None:
        plan = build_plan(load_profile("2x-pix"), resolved)
        assert plan is not None
        refs = {ref.arg: ref.record() for ref in plan.git_refs}
        self.records[name] = ImageRecord(plan.request_hash, plan.tag, resolved, refs, "rig-x", "then")
        if image:
            self.images.add((name, plan.tag))

    def resolve(self, name: str, rebuild: bool = False) -> dict[str, str]:
        plan = build_plan(load_profile("2x-pix"))
        assert plan is not None
        resolution = resolve_for_host(self.state, self.hosts[name], plan, rebuild)
        assert resolution.error is None, resolution.error
        return resolution.commits


def test_a_rig_with_its_record_asks_no_remote() -> None:
    rigs = Rigs()
    rigs.record("rig-a", commits(OLD), image=True)
    assert rigs.resolve("rig-a") == commits(OLD) and rigs.asked == []


def test_a_rig_without_a_record_takes_the_fleets_and_asks_no_remote() -> None:
    rigs = Rigs()
    rigs.record("rig-b", commits(NEW), image=False)
    rigs.record("rig-c", commits(OLD), image=True)
    assert rigs.resolve("rig-a") == commits(OLD)  # the record whose image is there comes first
    assert rigs.asked == []


def test_no_record_anywhere_resolves_once_for_every_rig_of_the_run() -> None:
    rigs = Rigs()
    assert [rigs.resolve(name) for name in ("rig-b", "rig-a", "rig-c")] == [commits(NEW)] * 3
    assert rigs.asked == ["rig-b", "rig-b"]  # one ls-remote per repository, on the first rig that asked


def test_rebuild_resolves_afresh_once_and_says_what_the_record_had() -> None:
    rigs = Rigs()
    for name in rigs.hosts:
        rigs.record(name, commits(OLD), image=True)
    plan = build_plan(load_profile("2x-pix"))
    assert plan is not None
    first = resolve_for_host(rigs.state, rigs.hosts["rig-c"], plan, rebuild=True)
    assert first.commits == commits(NEW) and first.previous == commits(OLD) and first.source == "fresh"
    assert [rigs.resolve(name, rebuild=True) for name in ("rig-a", "rig-b")] == [commits(NEW)] * 2
    assert len(rigs.asked) == 2


def test_a_ref_that_does_not_resolve_is_the_resolutions_one_line() -> None:
    rigs = Rigs()
    rigs.listing = LsRemote(True, 0, {"refs/heads/main": OTHER}, ())
    plan = build_plan(load_profile("2x-pix"))
    assert plan is not None
    resolution = resolve_for_host(rigs.state, rigs.hosts["rig-a"], plan, rebuild=False)
    assert resolution.commits == {} and resolution.error == (
        f"engine.build.args.SGLANG_REF: 'blackwell-cu130' does not resolve in {SGLANG} (git ls-remote on rig-a lists "
        "no branch or tag of that name); name an existing branch or tag, or pin a commit (40 hex digits)")
