"""Engine image build plans: the Dockerfile, build args and patches a profile asks for, and the image tag.

The tag is ``rigforge/<engine>:<hash>``, where the hash covers everything that goes into the build:
the rendered Dockerfile (template text with the profile's pinned values), the build args (base image
included), every file rigforge puts into the build context, and the sha256 of every patch. A changed
input gives a new tag, so the image is rebuilt; unchanged inputs give the same tag, which is already
there, so nothing is built. ``docker build``'s own check is by tag only (provisioning.md §A5).

Example::

    plan = build_plan(profile)      # None when the profile runs a published image or a native server
    plan.tag                        # "rigforge/sglang:3f9a0c2d41b7e655"
    image_ref(profile)              # what the service runs: the built tag or engine.image
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

from rigforge.profile import Profile
from rigforge.profile.loader import ProfileError
from rigforge.render import TEMPLATES_DIR, header_text, render

#: Build contexts (one directory per Dockerfile template) and the helper scripts live here on the rig.
IMAGES_ROOT = "/var/lib/rigforge/images"
#: Build logs are kept here on the rig, one file per built tag.
LOG_DIR = "/var/log/rigforge"
TAG_REPOSITORY = "rigforge"
HASH_LENGTH = 16
#: The patch applier copied into the build context; it runs there with the image's python3.
APPLY_PATCH_SOURCE = Path(__file__).resolve().parent / "remote" / "apply_patch.py"
#: The downloader run on the rig to fetch patches into the build context.
FETCH_SOURCE = Path(__file__).resolve().parent / "remote" / "fetch.py"
#: The repository root: profile patches with ``path`` name files under its patches/ folder.
REPOSITORY = Path(__file__).resolve().parents[1]
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
    dockerfile: str  # rendered Dockerfile text
    context_files: dict[str, str] = field(default_factory=dict)  # other files rigforge writes into the context
    content_hash: str = ""

    @property
    def tag(self) -> str:
        return f"{TAG_REPOSITORY}/{self.engine}:{self.content_hash}"

    @property
    def context_dir(self) -> str:
        return f"{IMAGES_ROOT}/{self.template}"

    @property
    def log_path(self) -> str:
        return f"{LOG_DIR}/image-{self.template}-{self.content_hash}.log"

    @property
    def labels(self) -> dict[str, str]:
        return {"org.rigforge.build-hash": self.content_hash, "org.rigforge.dockerfile": self.template}

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


def build_plan(profile: Profile) -> BuildPlan | None:
    """The image build the profile asks for, or None when it runs a published image or a native server."""
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
    try:
        dockerfile = render(template, profile, base_image=build.base_image,
                            args={key: dockerfile_quote(value) for key, value in args.items()},
                            patches=patches, jit_cache_path=jit_cache_path(profile))
    except jinja2.UndefinedError as exc:
        raise ImagePlanError(f"templates/{template} needs a value the profile does not give "
                             f"(engine.build.args?): {exc.message}") from None
    header, _, body = dockerfile.partition("\n")
    if header_text(profile) not in header:
        raise ImagePlanError(f"templates/{template}: the first line must be the managed-by comment")
    digest = content_hash(body, args, context_files, [p.sha256 for p in patches])
    return BuildPlan(engine=profile.engine.kind, template=build.dockerfile, base_image=build.base_image,
                     args=args, patches=patches, dockerfile=dockerfile, context_files=context_files,
                     content_hash=digest)


def image_ref(profile: Profile) -> str:
    """The image the engine container runs: the built tag (``engine.build``) or ``engine.image``.

    Raises ImagePlanError for a native engine, which runs no image.
    """
    plan = build_plan(profile)
    if plan is not None:
        return plan.tag
    if profile.engine.image is None:
        raise ImagePlanError(f"profile {profile.name}: engine {profile.engine.kind} runs natively, not in an image")
    return profile.engine.image
