"""What a build's git refs resolve to, once per fleet: the rig's record, another rig's, or ``git ls-remote`` now.

pyinfra plans every host of a run at once (one greenlet each), so the decision for a build request (its refs as
the profile names them, ``BuildPlan.request_hash``) is taken on the controller, for the whole run:

- a rig with a record of the request (/var/lib/rigforge/images/records/) builds from the commits it records: no
  remote is asked (a converged rig's no-op reads the record with the read-ahead, one round trip);
- a rig without one takes the record of another rig of the run that has one (the first in inventory order whose
  image is there, else the first with a record), so a rig added to a fleet gets the fleet's image;
- when no rig has one, or ``--data rebuild=true``, the refs are resolved afresh, once for the run: ``git
  ls-remote`` on the first rig that asks (on this machine when that rig has no git yet, and it says so), and
  every rig of the run gets the same commits. A ref that does not resolve stops the rigs that need it with one
  line naming the ref and the repository.

``rig_commits(profile)`` answers the same question for the code that names the image (the unit, the bench
metadata): this run's decision for the host, else its record.

Example::

    resolution = resolve_for_host(state, host, plan, rebuild=False)   # plan = build_plan(profile) (unresolved)
    build_plan(profile, resolution.commits).tag
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from datetime import datetime, timezone

import gevent
import gevent.event
from pyinfra.api.host import Host
from pyinfra.api.state import State
from pyinfra.context import ctx_host

from rigforge.facts.images import DockerImageId, GitRemoteRefs, ImageRecord, ImageRecordFile
from rigforge.images.git_refs import LsRemote, UnresolvedRef, ls_remote_here, resolve
from rigforge.images.plans import BuildPlan, build_plan
from rigforge.profile import Profile
from rigforge.serving.engines import read_rig_commits_with


@dataclass(frozen=True)
class Resolution:
    """The commits a host builds a request from, and where they come from.

    + commits: build arg -> commit
    + resolved_on / resolved_at: who ran ``git ls-remote`` and when (a pinned build: ``pinned in the profile``)
    + source: ``record`` (this rig's), ``fleet`` (another rig's record), ``fresh`` (resolved in this run), ``pinned``
    + previous: with rebuild=true, the commits this rig's record held before (None: none)
    + error: the one line when a ref did not resolve (then ``commits`` is empty)
    """

    commits: dict[str, str]
    resolved_on: str
    resolved_at: str
    source: str
    previous: dict[str, str] | None = None
    error: str | None = None


@dataclass
class _Request:
    """One build request in one run: the fleet's records of it and, when needed, its fresh resolution."""

    ready: gevent.event.Event = field(default_factory=gevent.event.Event)
    records: dict[str, tuple[ImageRecord, bool]] = field(default_factory=dict)  # host -> (record, image there)
    fresh: Resolution | None = None


_requests: weakref.WeakKeyDictionary[State, dict[tuple[str, bool], _Request]] = weakref.WeakKeyDictionary()
_decided: weakref.WeakKeyDictionary[Host, dict[str, Resolution]] = weakref.WeakKeyDictionary()


def fleet_hosts(state: State) -> list[Host]:
    """The run's active rigs in inventory order (pyinfra keeps them as a set)."""
    active = state.active_hosts
    return [candidate for candidate in state.inventory if candidate in active]


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _from_record(record: ImageRecord, source: str, on: str = "") -> Resolution:
    where = record.resolved_on + (f" (record taken from {on})" if on else "")
    return Resolution(dict(record.commits), where, record.resolved_at, source)


def resolve_for_host(state: State, host: Host, plan: BuildPlan, rebuild: bool) -> Resolution:
    """The commits ``host`` builds ``plan`` (an unresolved plan) from in this run; decided once per request.

    + state: the run
    + host: the rig being planned
    + plan: ``build_plan(profile)`` without commits (its refs as the profile names them)
    + rebuild: ``--data rebuild=true``: resolve afresh (once for the run) whatever the records say
    """
    decided = _decided.setdefault(host, {})
    if plan.request_hash in decided:
        return decided[plan.request_hash]
    own = host.get_fact(ImageRecordFile, path=plan.record_path)
    if all(ref.pinned for ref in plan.git_refs):
        resolution = Resolution({ref.arg: ref.ref for ref in plan.git_refs}, "pinned in the profile", "", "pinned")
    elif own is not None and not rebuild:
        resolution = _from_record(own, "record")
    else:
        request = _fleet_request(state, host, plan, rebuild)
        if rebuild:
            assert request.fresh is not None
            resolution = _with_previous(request.fresh, own)
        else:
            resolution = _fleet_choice(state, request) or request.fresh
            assert resolution is not None  # no record anywhere: the request was resolved afresh
    decided[plan.request_hash] = resolution
    return resolution


def _with_previous(fresh: Resolution, own: ImageRecord | None) -> Resolution:
    if own is None:
        return fresh
    return Resolution(fresh.commits, fresh.resolved_on, fresh.resolved_at, fresh.source, dict(own.commits),
                      fresh.error)


def _fleet_request(state: State, host: Host, plan: BuildPlan, rebuild: bool) -> _Request:
    """The run's view of a request: the first host to ask gathers it, the others wait for it."""
    requests = _requests.setdefault(state, {})
    key = (plan.request_hash, rebuild)
    if key in requests:
        requests[key].ready.wait()
        return requests[key]
    request = requests[key] = _Request()
    try:
        if rebuild:
            request.fresh = _ls_remote(host, plan)
        else:
            request.records = _gather_records(state, plan)
            if not request.records:
                request.fresh = _ls_remote(host, plan)
    finally:
        request.ready.set()
    return request


def _fleet_choice(state: State, request: _Request) -> Resolution | None:
    """Another rig's record: the first in inventory order whose image is there, else the first with a record."""
    order = [candidate.name for candidate in fleet_hosts(state)]
    ranked = sorted(request.records.items(), key=lambda item: (not item[1][1], order.index(item[0])
                                                               if item[0] in order else len(order)))
    if not ranked:
        return None
    name, (record, _) = ranked[0]
    return _from_record(record, "fleet", on=name)


def _gather_records(state: State, plan: BuildPlan) -> dict[str, tuple[ImageRecord, bool]]:
    """Every active rig's record of the request, and whether the image it names is there (read in parallel)."""

    def read(other: Host) -> tuple[ImageRecord, bool] | None:
        with ctx_host.use(other):
            record = other.get_fact(ImageRecordFile, path=plan.record_path)
            if record is None:
                return None
            return record, bool(other.get_fact(DockerImageId, ref=record.tag))

    jobs = {other.name: gevent.spawn(read, other) for other in fleet_hosts(state)}
    gevent.joinall(list(jobs.values()))
    return {name: job.value for name, job in jobs.items() if job.successful() and job.value is not None}


def _ls_remote(host: Host, plan: BuildPlan) -> Resolution:
    """Resolve the plan's refs now: ``git ls-remote`` on the rig, on this machine when the rig has no git."""
    unpinned = [ref for ref in plan.git_refs if not ref.pinned]
    listings: dict[str, LsRemote] = {}
    where = f"on {host.name}"
    for repository in dict.fromkeys(ref.repository for ref in unpinned):
        names = [ref.ref for ref in unpinned if ref.repository == repository]
        listing = host.get_fact(GitRemoteRefs, repository=repository, names=names)
        if not listing.git:
            where = f"on this machine ({host.name} has no git yet)"
            listing = ls_remote_here(repository, names)
        listings[repository] = listing
    try:
        commits = resolve(plan.git_refs, listings, where)
    except UnresolvedRef as error:
        return Resolution({}, where, _now(), "fresh", error=str(error))
    return Resolution(commits, where.removeprefix("on "), _now(), "fresh")


def decided_commits(host: Host, request_hash: str) -> dict[str, str] | None:
    """The commits this run decided for ``host`` and a request, None when it decided none (yet)."""
    resolution = _decided.get(host, {}).get(request_hash)
    return None if resolution is None or resolution.error else resolution.commits


def rig_commits(host: Host, profile: Profile) -> dict[str, str]:
    """The commits the image ``profile`` names on ``host`` is built from: this run's decision, else its record
    (empty when neither: the image is not there yet, and its tag is not known)."""
    plan = build_plan(profile)
    if plan is None or not plan.git_refs:
        return {}
    decided = decided_commits(host, plan.request_hash)
    if decided is not None:
        return decided
    record = host.get_fact(ImageRecordFile, path=plan.record_path)
    return dict(record.commits) if record else {}


def record_document(plan: BuildPlan, resolution: Resolution) -> dict[str, object]:
    """What the rig's record of a request says (templates/images/image-record.json.j2): the refs as named,
    their commits, where and when they were resolved, and the tag built from them."""
    return {"request_hash": plan.request_hash, "dockerfile": plan.template, "tag": plan.tag,
            "git_refs": {ref.arg: ref.record() for ref in plan.git_refs},
            "resolved_on": resolution.resolved_on, "resolved_at": resolution.resolved_at}


def rig_git_refs(host: Host, profile: Profile) -> dict[str, dict[str, str | None]]:
    """The git refs of the image ``profile`` names on ``host``: build arg -> repository, ref as named, commit."""
    plan = build_plan(profile, rig_commits(host, profile))
    return {ref.arg: ref.record() for ref in plan.git_refs} if plan else {}


# The unit and everything else that names a built image (rigforge.serving.engines.image_ref) asks this module
# for a rig's commits; serving sits below the facts this reads, so it is handed the reader instead.
read_rig_commits_with(rig_commits)
