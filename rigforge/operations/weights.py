"""Operations that put model weights on a rig: verified, resumable, recorded in a manifest.

Each operation reads ``WeightsOnDisk`` when it runs (sizes and mtimes, never contents), so a converged
host costs one ``find`` and changes nothing. The rig-side work (hashing, renaming, the manifest, disk
space, downloads) is done by ``weights_tool.py``, uploaded beside ``fetch.py`` by the weights role.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator

from pyinfra import host
from pyinfra.api import FileUploadCommand, QuoteString, StringCommand, operation

from rigforge.facts.weights import PART_SUFFIX, HubRevisionSize, HubSize, WeightsOnDisk, WeightsState
from rigforge.operations.files import upload_commands
from rigforge.profile import Model, ModelFile

#: Bytes sent per upload command; a killed transfer loses at most one chunk.
UPLOAD_CHUNK_BYTES = 32 * 1024 * 1024
GB = 1e9


def fail(message: str) -> StringCommand:
    """A command that stops the operation on the host with ``message`` on stderr."""
    return StringCommand("echo", QuoteString(message), ">&2;", "exit", "1")


def tool_command(python: str, tool: str, *args: str | int, transfer: bool = False) -> StringCommand:
    """``python weights_tool.py ARGS`` with every argument quoted.

    A ``transfer`` (a download that runs for minutes) gets a terminal, so that when the controller goes away
    the hang-up ends it too: without one it ran on detached, appending to the ``.part`` file beside the
    next run's download of the same file.
    """
    return StringCommand(QuoteString(python), QuoteString(tool), *[QuoteString(str(arg)) for arg in args],
                         _get_pty=transfer)


def missing_files(model: Model, state: WeightsState) -> list[ModelFile]:
    """The profile's files that are not in the manifest (with their sha256) unchanged on disk."""
    return [wanted for wanted in model.files if not state.verified(wanted.name, wanted.sha256)]


def space_needed(model: Model, state: WeightsState, missing: list[ModelFile]) -> tuple[int, int, int]:
    """(bytes still to store, bytes expected in all, bytes already there) for the disk-space check.

    The expectation is the larger of ``model.size_gb`` and the sum of the known file sizes; what is
    already complete or partly transferred counts as present.
    """
    expected = max(int(model.size_gb * GB), sum(f.size for f in model.files))
    complete = sum(f.size for f in model.files if f not in missing)
    partial = sum(min(state.part_size(f.name), f.size) for f in missing)
    present = complete + partial
    return max(expected - present, 0), expected, present


def hub_size(model: Model, python: str, tool: str, token_file: str) -> HubSize:
    """The size of ``model``'s pinned revision as the hub lists it, asked on the rig (``HubRevisionSize``)."""
    return host.get_fact(HubRevisionSize, python=python, tool=tool, repo=model.repo_id or "",
                         revision=model.revision or "", allow=list(model.allow_patterns), token_file=token_file,
                         endpoint=model.hf_endpoint.rstrip("/") if model.hf_endpoint else None)


def bytes_to_fetch(model: Model, state: WeightsState, listed: int | None = None) -> int:
    """How many bytes of ``model`` are still to come (0: complete as its manifest records it).

    The same reckoning as the download's own disk check: a repository checkout is expected at ``listed`` (the
    hub's file list of the revision) where known, else ``model.size_gb``; named files by their sizes; what is
    complete or partly transferred counts as there.
    """
    if model.source == "huggingface":
        manifest = state.manifest
        if manifest is not None and (manifest.source, manifest.origin, manifest.revision) == (
                "huggingface", model.repo_id, model.revision) and state.all_recorded_verified():
            return 0
        expected = listed if listed is not None else int(model.size_gb * GB)
        return max(expected - sum(f.size for f in state.files.values()), 0)
    missing = missing_files(model, state)
    return space_needed(model, state, missing)[0] if missing else 0


@operation()
def verify_weights(path: str, tool: str, python: str = "python3"):
    """
    Re-hash every file the manifest records; delete and un-record the corrupt ones (fetched again next).

    + path: the model folder
    + tool: path of weights_tool.py on the rig
    + python: interpreter that runs it

    **Example:**

    .. code:: python

        verify_weights(name="Re-hash the weights", path="/srv/models/x", tool="/opt/rigforge/lib/weights_tool.py")
    """
    state = host.get_fact(WeightsOnDisk, path=path)
    if state.manifest is None or not state.manifest.files:
        host.noop(f"{path}: no recorded weights to verify")
        return
    recorded = {entry.name for entry in state.manifest.files}
    yield tool_command(python, tool, "verify", "--dir", path)
    after = host.get_fact(WeightsOnDisk, path=path).manifest
    corrupt = sorted(recorded - {entry.name for entry in (after.files if after else ())})
    host.log(f"verified {len(recorded)} file(s) in {path}: {len(corrupt)} corrupt"
             + (f" ({', '.join(corrupt)}), fetched again next" if corrupt else ""))


@operation()
def weights_from_files(model: Model, tool: str, python: str = "python3",
                       chunk_bytes: int = UPLOAD_CHUNK_BYTES):
    """
    Bring the profile's listed files to ``model.path`` from a local file (upload) or an HTTP mirror.

    + model: the profile's model section (source ``local`` or ``mirror``, with ``files``)
    + tool: path of weights_tool.py on the rig (fetch.py beside it for the mirror)
    + python: interpreter that runs it
    + chunk_bytes: upload chunk size (local source)

    A file already at its final name but not recorded is hashed once and kept or deleted. Local uploads
    append chunks to ``<file>.part`` and continue from its size after an interruption; mirror downloads
    resume through fetch.py. Disk space is checked before the first byte moves.

    **Example:**

    .. code:: python

        weights_from_files(name="Weights", model=profile.model, tool="/opt/rigforge/lib/weights_tool.py")
    """
    state = host.get_fact(WeightsOnDisk, path=model.path)
    missing = missing_files(model, state)
    if not missing:
        host.noop(f"{model.path}: {len(model.files)} file(s) recorded in the manifest and unchanged")
        return
    unrecorded = [f for f in missing if f.name in state.files]
    for wanted in unrecorded:
        yield tool_command(python, tool, "adopt", "--dir", model.path, "--name", wanted.name,
                           "--sha256", wanted.sha256, "--size", wanted.size, "--source", model.source,
                           "--origin", _origin(model))
    if unrecorded:
        state = host.get_fact(WeightsOnDisk, path=model.path)
        missing = missing_files(model, state)
    if not missing:
        return
    need, expected, present = space_needed(model, state, missing)
    yield tool_command(python, tool, "check-space", "--path", model.path, "--need", need,
                       "--expected", expected, "--present", present)
    for wanted in missing:
        if model.source == "mirror":
            url = f"{(model.mirror_url or '').rstrip('/')}/{wanted.name}"
            yield tool_command(python, tool, "mirror", "--dir", model.path, "--name", wanted.name,
                               "--sha256", wanted.sha256, "--size", wanted.size, "--url", url, transfer=True)
        else:
            yield from _upload(model, wanted, state.part_size(wanted.name), tool, python, chunk_bytes)


def _origin(model: Model) -> str:
    if model.source == "mirror":
        return model.mirror_url or ""
    return os.path.basename(model.local_path or "")


def _upload(model: Model, wanted: ModelFile, offset: int, tool: str, python: str,
            chunk_bytes: int) -> Iterator[StringCommand | FileUploadCommand]:
    """Append the rest of a local file to ``<dest>.part`` chunk by chunk, then verify and rename it."""
    source = os.path.join(model.local_path or "", wanted.name) if os.path.isdir(model.local_path or "") \
        else model.local_path or ""
    if not os.path.isfile(source) or os.path.getsize(source) != wanted.size:
        found = f"{os.path.getsize(source)} bytes" if os.path.isfile(source) else "no such file"
        yield fail(f"model.local_path {source}: {found} on this machine, the profile says {wanted.size} bytes")
        return
    dest = f"{model.path}/{wanted.name}"
    part, chunk_path = dest + PART_SUFFIX, dest + ".chunk"
    if offset > wanted.size:
        offset = 0  # longer than the file: nothing in it can be trusted
        yield StringCommand("truncate", "-s", "0", QuoteString(part))
    if offset:
        host.log(f"{wanted.name}: resuming the upload at {offset / 1e6:.1f} of {wanted.size / 1e6:.1f} MB")
    step = max(wanted.size // 10, 1)
    reported = offset
    with open(source, "rb") as local:
        local.seek(offset)
        while offset < wanted.size:
            block = local.read(chunk_bytes)
            yield from upload_commands(io.BytesIO(block), chunk_path)
            # Appending only whole uploaded chunks keeps .part a prefix of the file, whatever is killed when.
            yield StringCommand("cat", QuoteString(chunk_path), ">>", QuoteString(part), "&&",
                                "rm", "-f", QuoteString(chunk_path))
            offset += len(block)
            if offset - reported >= step or offset == wanted.size:
                host.log(f"{wanted.name}: uploaded {offset / 1e6:.1f} of {wanted.size / 1e6:.1f} MB")
                reported = offset
    yield tool_command(python, tool, "finish", "--dir", model.path, "--name", wanted.name,
                       "--sha256", wanted.sha256, "--size", wanted.size, "--source", model.source,
                       "--origin", _origin(model))


@operation()
def weights_from_hub(model: Model, tool: str, python: str, token_file: str):
    """
    Bring ``model.path`` to the pinned Hugging Face revision (``repo_id``, ``revision``, ``allow_patterns``).

    + model: the profile's model section (source ``huggingface``)
    + tool: path of weights_tool.py on the rig (hf_source.py beside it)
    + python: the huggingface_hub venv's interpreter
    + token_file: env file with ``HF_TOKEN=`` (mode 0600); read by the tool, never passed on a command line

    Does nothing while the manifest records this repo, revision and patterns and every recorded file is
    unchanged on disk: the hub is not asked again for a pinned revision. Otherwise the disk check expects the
    revision's real size from the hub's file list where the rig can ask it (``HubRevisionSize``), else
    ``model.size_gb``, and says which.

    **Example:**

    .. code:: python

        weights_from_hub(name="Weights", model=profile.model, tool=TOOL, python=HF_PYTHON, token_file=TOKEN)
    """
    state = host.get_fact(WeightsOnDisk, path=model.path)
    manifest = state.manifest
    same_source = manifest is not None and (manifest.source, manifest.origin, manifest.revision,
                                            manifest.allow_patterns) == (
        "huggingface", model.repo_id, model.revision, tuple(model.allow_patterns))
    if same_source and state.all_recorded_verified():
        host.noop(f"{model.path}: {model.repo_id}@{model.revision} recorded in the manifest and unchanged")
        return
    hub = hub_size(model, python, tool, token_file)
    expected = hub.size if hub.size is not None else int(model.size_gb * GB)
    host.log(f"{model.path}: expecting {expected / GB:.1f} GB, from {hub.said}")
    present = sum(f.size for f in state.files.values())
    yield tool_command(python, tool, "check-space", "--path", model.path, "--need", max(expected - present, 0),
                       "--expected", expected, "--present", present, "--expected-from", hub.said)
    args: list[str] = ["hf-download", "--dir", model.path, "--repo", model.repo_id or "",
                       "--revision", model.revision or "", "--token-file", token_file]
    for pattern in model.allow_patterns:
        args += ["--allow", pattern]
    if model.hf_endpoint:
        args += ["--endpoint", model.hf_endpoint.rstrip("/")]
    yield tool_command(python, tool, *args, transfer=True)
