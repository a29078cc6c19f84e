"""Engine image operations: the image built once per fleet (or loaded from the rig that built it), its contents
file copied beside its build log, and a build that cannot start refused with one line.

Each reads a fact and yields only when something is missing, so a converged rig plans nothing.
"""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS
from pyinfra.facts.files import File

from rigforge.facts.images import DockerImageId
from rigforge.fleet.image_share import Provide, provide_image
from rigforge.images.plans import IMAGE_CONTENTS_PATH
from rigforge.operations.dpkg_repair import refusal


@operation()
def image_provided(tag: str, arguments: list[str], log: str, script: str, commits: dict[str, str]):
    """
    Make image ``tag`` present, unless it is: built here by the first rig of the run that needs it, or loaded
    from a rig of the run that has it (rigforge/fleet/image_share.py). The tag must name the build's inputs.

    + tag: image tag (a content hash), also passed in ``arguments``
    + arguments: everything after ``docker build`` (tag, labels, build args, Dockerfile, context)
    + log: file on the host that keeps the whole build output
    + script: the build runner on the host (prints progress, keeps the log, summarises)
    + commits: build arg -> commit the image must carry (checked on an image loaded from another rig)

    **Example:**

    .. code:: python

        image_provided(name="Build the engine image", tag=plan.tag, arguments=plan.docker_build_arguments(),
                       log=plan.log_path, script="/var/lib/rigforge/images/build-image.sh", commits=plan.commits)
    """
    if host.get_fact(DockerImageId, ref=tag):
        host.noop(f"image {tag} is present")
        return
    globals_ = host.current_op_global_arguments or {}
    connector = {key: value for key, value in globals_.items() if key in CONNECTOR_ARGUMENT_KEYS}
    yield FunctionCommand(provide_image, (Provide(tag, tuple(arguments), log, script, dict(commits), connector),),
                          {})


@operation()
def image_contents_copied(tag: str, dest: str):
    """
    Copy the image's contents file (pip freeze, versions, commits) out of the image to ``dest``, unless there.

    + tag: the image (present by the time this operation executes)
    + dest: where it goes on the host, beside the build log

    A container is created (never started) to copy the file from, and removed; the file is written beside
    ``dest`` and renamed, so a cut copy leaves nothing at ``dest``.

    **Example:**

    .. code:: python

        image_contents_copied(name="Copy the image's contents file", tag=plan.tag, dest=plan.contents_path)
    """
    if host.get_fact(File, path=dest):
        host.noop(f"{dest} is present")
        return
    temporary = shlex.quote(f"{dest}.rigforge-new")
    yield StringCommand(
        f"id=$(docker create {shlex.quote(tag)} true) && {{ docker cp \"$id:{IMAGE_CONTENTS_PATH}\" - | tar -xO > "
        f"{temporary}; status=$?; docker rm \"$id\" >/dev/null; [ $status -eq 0 ] && [ -s {temporary} ]; }} "
        f"&& mv -f {temporary} {shlex.quote(dest)}")


@operation()
def build_refused(line: str):
    """
    Stop this host with ``line`` before anything of the image is written or built (a ref that does not resolve).

    + line: the one line that says what and why

    **Example:**

    .. code:: python

        build_refused(name="Resolve the build's git refs", line="engine.build.args.SGLANG_REF: ...")
    """
    yield from refusal(line)
