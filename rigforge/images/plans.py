"""Engine image build plans: the Dockerfile, build args and patches a profile asks for, and the image tag.

The tag is ``rigforge/<engine>:<hash>``, where the hash covers everything that goes into the build:
the rendered Dockerfile (template text with the profile's pinned values), the build args (base image
included), every file rigforge puts into the build context, and the sha256 of every patch. A changed
input gives a new tag, so the image is rebuilt; unchanged inputs give the same tag, which is already
there, so nothing is built. ``docker build``'s own check is by tag only (provisioning.md §A5).

A git ref in the build args (the template's ``git_sources`` say which args are refs) enters the hash as the
commit it resolved to (rigforge/fleet/image_commits.py), never as its name: one tag, one code. The *request*
hash, the same sum over the refs as named, keys the rig's record of their commits (/var/lib/rigforge/images/records/).

Example::

    plan = build_plan(profile, {"SGLANG_REF": "4f1c…"})   # None for a published image or a native server
    plan.tag                        # "rigforge/sglang:3f9a0c2d41b7e655"
    image_ref(profile, commits)     # what the service runs: the built tag or engine.image
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from rigforge.images.git_refs import GitRef, GitSource, is_commit
from rigforge.profile import Profile
from rigforge.profile.loader import ProfileError
from rigforge.render import TEMPLATES_DIR, header_text, render_with_exports

#: Build contexts (one directory per Dockerfile template) and the helper scripts live here on the rig.
IMAGES_ROOT = "/var/lib/rigforge/images"
#: Build logs are kept here on the rig, one file per built tag (and the image's contents file beside it).
LOG_DIR = "/var/log/rigforge"
#: What each build request's git refs resolved to, one JSON file per request hash, written whole.
RECORDS_DIR = f"{IMAGES_ROOT}/records"
#: The contents file every built image carries (rigforge/remote/image_contents.py writes it in the build).
IMAGE_CONTENTS_PATH = "/etc/rigforge/image.json"
TAG_REPOSITORY = "rigforge"
HASH_LENGTH = 16
#: The patch applier copied into the build context; it runs there with the image's python3.
APPLY_PATCH_SOURCE = Path(__file__).resolve().parents[1] / "remote" / "apply_patch.py"
#: The script that writes the image's contents file, copied into every build context.
IMAGE_CONTENTS_SOURCE = Path(__file__).resolve().parents[1] / "remote" / "image_contents.py"
#: The downloader run on the rig to fetch patches into the build context.
FETCH_SOURCE = Path(__file__).resolve().parents[1] / "remote" / "fetch.py"
#: The repository root: profile patches with ``path`` name files under its patches/ folder.
REPOSITORY = Path(__file__).resolve().parents[2]
#: The K=64 compile check (patches/check/), copied into the context when a patch asks for it.
CHECK_SOURCES = tuple(REPOSITORY / "patches" / "check" / name for name in ("k64_check.py", "k64_collective.cu"))


class ImagePlanError(ProfileError):
    """The profile's image settings cannot be turned into a build (unknown template, missing arg)."""


@dataclass(frozen=True)
class PatchFile:
    """One patch named by the profile, and where it lands in the build context."""

    url: str | None  # None: a file of this repository, written into the context by rigforge
    sha256: str
    root: str  # installed package the patch paths are relative to (e.g. flashinfer)
    file: str  # path inside the build context, e.g. patches/01-k64.patch
    check: str | None = None  # compile check run after applying (patches/check/), e.g. sm120-k64


@dataclass(frozen=True)
class BuildPlan:
    """Everything needed to build one engine image on the rig, and the tag that names it."""

    engine: str
    template: str
    base_image: str
    args: dict[str, str]  # --build-arg values, BASE_IMAGE first
    patches: tuple[PatchFile, ...]
    dockerfile: str  # rendered Dockerfile text (the refs' commits in its ARG lines once resolved)
    context_files: dict[str, str] = field(default_factory=dict)  # other files rigforge writes into the context
    content_hash: str = ""
    git_refs: tuple[GitRef, ...] = ()  # the args the template declares as git refs, with their commits
    request_hash: str = ""  # the same sum with the refs as the profile names them: keys the rig's record

    @property
    def tag(self) -> str:
        return f"{TAG_REPOSITORY}/{self.engine}:{self.content_hash}"

    @property
    def resolved(self) -> bool:
        """Every git ref has its commit: the plan can be built (an unresolved plan's tag is not the image's)."""
        return all(ref.commit for ref in self.git_refs)

    @property
    def commits(self) -> dict[str, str]:
        return {ref.arg: ref.commit for ref in self.git_refs if ref.commit}

    @property
    def record_path(self) -> str:
        """The rig's record of what this request's refs resolved to and the tag built from them."""
        return f"{RECORDS_DIR}/{self.template}-{self.request_hash}.json"

    @property
    def contents_path(self) -> str:
        """The image's contents file, copied out of the image beside its build log."""
        return f"{LOG_DIR}/image-{self.template}-{self.content_hash}.json"

    @property
    def context_dir(self) -> str:
        return f"{IMAGES_ROOT}/{self.template}"

    @property
    def log_path(self) -> str:
        return f"{LOG_DIR}/image-{self.template}-{self.content_hash}.log"

    @property
    def labels(self) -> dict[str, str]:
        """The image's labels: its inputs' hash (the tag's), the request it answers, and each ref's commit."""
        labels = {"org.rigforge.build-hash": self.content_hash, "org.rigforge.dockerfile": self.template,
                  "org.rigforge.request-hash": self.request_hash}
        for ref in self.git_refs:
            labels[f"org.rigforge.commit.{ref.arg}"] = ref.commit or ""
            labels[f"org.rigforge.repository.{ref.arg}"] = ref.repository
        return labels

    def docker_build_arguments(self) -> list[str]:
        """Arguments after ``docker build``: tag, labels, build args, Dockerfile and context."""
        arguments = ["--tag", self.tag]
        for key, value in self.labels.items():
            arguments += ["--label", f"{key}={value}"]
        for key, value in self.args.items():
            arguments += ["--build-arg", f"{key}={value}"]
        return [*arguments, "--file", f"{self.context_dir}/Dockerfile", self.context_dir]

    def record(self) -> dict[str, object]:
        """What build-plan.json on the rig says about this build (shown by ``--dry --diff``)."""
        return {
            "tag": self.tag,
            "engine": self.engine,
            "dockerfile": f"templates/images/{self.template}.Dockerfile.j2",
            "base_image": self.base_image,
            "build_args": self.args,
            "patches": [vars(patch) for patch in self.patches],
            "context_files": {name: _sha256(text) for name, text in sorted(self.context_files.items())},
            "git_refs": {ref.arg: ref.record() for ref in self.git_refs},
            "log": self.log_path,
        }


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def content_hash(dockerfile_body: str, args: Mapping[str, str], context_files: Mapping[str, str],
                 patch_hashes: list[str]) -> str:
    """Hash of every build input; the same inputs always give the same hash.

    + dockerfile_body: the rendered Dockerfile without its managed-by line (which names the profile)
    + args: the build args, base image included
    + context_files: name -> text of the other files rigforge writes into the build context
    + patch_hashes: sha256 of each patch, in the order they are applied
    """
    inputs = {
        "dockerfile": _sha256(dockerfile_body),
        "args": dict(sorted(args.items())),
        "context_files": {name: _sha256(text) for name, text in sorted(context_files.items())},
        "patches": list(patch_hashes),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:HASH_LENGTH]


def dockerfile_quote(value: str) -> str:
    """Quote a value for a Dockerfile ``ARG``/``ENV`` line: double quotes, with \\ and " escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def repository_patch(path: str, sha256: str) -> str:
    """Text of a patch file of this repository, refused unless its sha256 is the one the profile pins."""
    data = (REPOSITORY / path).read_bytes() if (REPOSITORY / path).is_file() else None
    if data is None:
        raise ImagePlanError(f"engine.build.patches: {path} does not exist in the repository")
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise ImagePlanError(f"engine.build.patches: {path} has sha256 {digest}, the profile pins {sha256}")
    return data.decode()


def patch_file_name(index: int, url: str) -> str:
    """Context path of the ``index``-th patch (1-based): ``patches/NN-<name from the URL>``."""
    name = posixpath.basename(urllib.parse.urlsplit(url).path)
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "patch"
    return f"patches/{index:02d}-{safe}"


def _template_path(name: str) -> str:
    template = f"images/{name}.Dockerfile.j2"
    if not (TEMPLATES_DIR / template).is_file():
        found = (TEMPLATES_DIR / "images").glob("*.Dockerfile.j2")
        known = sorted(path.name.removesuffix(".Dockerfile.j2") for path in found)
        raise ImagePlanError(f"engine.build.dockerfile {name!r}: no templates/{template} (have: {', '.join(known)})")
    return template


def jit_cache_path(profile: Profile) -> str | None:
    """Where the engine container mounts its JIT cache volume, or None without one."""
    docker = profile.engine.docker
    if docker is None or docker.jit_cache_volume is None:
        return None
    return docker.volumes[docker.jit_cache_volume]


def _git_sources(exports: Mapping[str, object], args: Mapping[str, str], template: str) -> dict[str, GitSource]:
    declared = exports.get("git_sources") or {}
    assert isinstance(declared, Mapping), f"templates/{template}: git_sources must map build args to checkouts"
    sources = {}
    for arg, source in declared.items():
        if arg not in args:
            raise ImagePlanError(f"templates/{template} checks out the git ref in build arg {arg}: "
                                 "engine.build.args must give it (a branch, a tag or a commit)")
        sources[arg] = GitSource(arg, str(source["repository"]), str(source["path"]))
    return sources


def build_plan(profile: Profile, commits: Mapping[str, str] | None = None) -> BuildPlan | None:
    """The image build the profile asks for, or None when it runs a published image or a native server.

    + profile: the profile (with its recipe laid over it)
    + commits: build arg -> the commit its git ref resolved to (the rig's record, or a fresh resolution); a ref
      the profile pins as a commit needs none. Without them the plan is unresolved: its tag is not the image's.
    """
    build = profile.engine.build
    if build is None:
        return None
    template = _template_path(build.dockerfile)
    args = {"BASE_IMAGE": build.base_image, **build.args}
    enabled = [patch for patch in build.patches if patch.enabled]
    patches = tuple(
        PatchFile(url=p.url, sha256=p.sha256, root=p.root, file=patch_file_name(i, p.url or p.path or ""),
                  check=p.check)
        for i, p in enumerate(enabled, 1)
    )
    context_files = {"apply_patch.py": APPLY_PATCH_SOURCE.read_text()} if patches else {}
    for declared, patch in zip(enabled, patches, strict=True):
        if declared.path is not None:
            context_files[patch.file] = repository_patch(declared.path, declared.sha256)
    if any(patch.check for patch in patches):
        context_files.update({f"check/{path.name}": path.read_text() for path in CHECK_SOURCES})
    context_files["image_contents.py"] = IMAGE_CONTENTS_SOURCE.read_text()
    patch_hashes = [p.sha256 for p in patches]
    requested, sources = _render(template, profile, args, patches)
    request_hash = content_hash(_body(requested), args, context_files, patch_hashes)
    known = {arg: value for arg, value in (commits or {}).items() if arg in sources}
    refs = tuple(GitRef(arg, source.repository, args[arg], args[arg] if is_commit(args[arg]) else known.get(arg))
                 for arg, source in sources.items())
    resolved_args = {**args, **{ref.arg: ref.commit for ref in refs if ref.commit}}
    dockerfile = _render(template, profile, resolved_args, patches)[0] if resolved_args != args else requested
    return BuildPlan(engine=profile.engine.kind, template=build.dockerfile, base_image=build.base_image,
                     args=resolved_args, patches=patches, dockerfile=dockerfile, context_files=context_files,
                     content_hash=content_hash(_body(dockerfile), resolved_args, context_files, patch_hashes),
                     git_refs=refs, request_hash=request_hash)


def _body(dockerfile: str) -> str:
    """The Dockerfile without its managed-by line, which names the profile (the same build in two profiles)."""
    return dockerfile.partition("\n")[2]


def _render(template: str, profile: Profile, args: Mapping[str, str],
            patches: tuple[PatchFile, ...]) -> tuple[str, dict[str, GitSource]]:
    """The rendered Dockerfile and the git refs the template declares."""
    build = profile.engine.build
    assert build is not None
    try:
        dockerfile, exports = render_with_exports(
            template, profile, base_image=build.base_image, build_args=dict(args),
            args={key: dockerfile_quote(value) for key, value in args.items()}, patches=patches,
            jit_cache_path=jit_cache_path(profile))
    except jinja2.UndefinedError as exc:
        raise ImagePlanError(f"templates/{template} needs a value the profile does not give "
                             f"(engine.build.args?): {exc.message}") from None
    if header_text(profile) not in dockerfile.partition("\n")[0]:
        raise ImagePlanError(f"templates/{template}: the first line must be the managed-by comment")
    return dockerfile, _git_sources(exports, args, template)


def image_ref(profile: Profile, commits: Mapping[str, str] | None = None) -> str:
    """The image the engine container runs: the built tag (``engine.build``, from the refs' ``commits``) or
    ``engine.image``.

    Raises ImagePlanError for a native engine, which runs no image.
    """
    plan = build_plan(profile, commits)
    if plan is not None:
        return plan.tag
    if profile.engine.image is None:
        raise ImagePlanError(f"profile {profile.name}: engine {profile.engine.kind} runs natively, not in an image")
    return profile.engine.image
