"""Write managed files atomically, with a diff under ``--dry --diff``."""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Iterator
from io import StringIO
from typing import IO

from pyinfra import host, logger, state
from pyinfra.api import FileUploadCommand, StringCommand, operation
from pyinfra.api.command import QuoteString
from pyinfra.facts.files import File, FileContents, Sha256File
from pyinfra.operations.util.files import generate_color_diff


@operation()
def managed_file(dest: str, content: str, mode: str = "644", user: str = "root", group: str = "root",
                 show_diff: bool = True):
    """
    Write ``content`` to ``dest`` atomically: upload beside it, set owner and mode, then rename.

    + dest: absolute path on the host
    + content: the full text of the file
    + mode: octal permission string; the file never exists at ``dest`` with other permissions
    + user: owner
    + group: group
    + show_diff: False for a file that may hold a secret (a receiver's URL): ``--diff`` names it, never its lines

    A missing parent directory is created (mode 755). Under ``--diff`` the unified diff against the current
    file is logged before anything is written.

    **Example:**

    .. code:: python

        managed_file(name="Write nccl.conf", dest="/etc/nccl.conf", content=render("nccl/nccl.conf.j2", p))
    """
    wanted_sha = hashlib.sha256(content.encode()).hexdigest()
    current = host.get_fact(File, path=dest)
    same_content = bool(current) and host.get_fact(Sha256File, path=dest) == wanted_sha
    same_meta = bool(current) and _mode_matches(current, mode) and _owner_matches(current, user, group)
    if same_content and same_meta:
        host.noop(f"{dest} is up to date")
        return

    if state.config.DIFF and not same_content:
        if show_diff:
            _log_diff(dest, content, exists=bool(current))
        else:
            what = "modify" if current else "create"
            host.log(f"Will {what} {dest} (its lines are not shown: they may hold a secret)")

    temp = posixpath.join(posixpath.dirname(dest), f".{posixpath.basename(dest)}.rigforge-new")
    if same_content:
        yield StringCommand("chown", f"{user}:{group}", QuoteString(dest))
        yield StringCommand("chmod", mode, QuoteString(dest))
        return
    # The temp file is created empty with the final mode before the content arrives, so a secret is never
    # readable by others, not even for a moment. -D creates a missing parent (mode 755); roles that need a
    # stricter directory create it first.
    yield StringCommand("install", "-D", "-m", mode, "-o", user, "-g", group, "/dev/null", QuoteString(temp))
    yield from upload_commands(StringIO(content), temp)
    yield StringCommand("mv", "-f", QuoteString(temp), QuoteString(dest))


#: Where a sudo login uploads first: SFTP writes as the login user, who cannot write root's directories.
UPLOAD_STAGING_DIR = "/var/lib/rigforge/upload"


def upload_commands(content: IO, remote_path: str) -> Iterator[StringCommand | FileUploadCommand]:
    """Upload ``content`` over ``remote_path`` (an existing file keeps its owner and mode), as root or as a sudoer.

    + content: the bytes or text to upload
    + remote_path: absolute path on the host

    Logged in as root, SFTP writes ``remote_path`` directly. Logged in as a sudoer (``_sudo=True``), pyinfra
    uploads to ``remote_temp_filename`` as the login user and copies it over with sudo: that staging file lies
    in a directory only the login user can enter (0700, under root's /var/lib/rigforge), never in /tmp where
    other users could read a secret while it passes.

    Example: ``yield from upload_commands(StringIO(text), "/etc/rigforge/.x.rigforge-new")``
    """
    staged = posixpath.join(UPLOAD_STAGING_DIR, posixpath.basename(remote_path))
    if host.data.get("_sudo") or state.config.SUDO:
        login_user = host.data.get("ssh_user") or "root"
        yield StringCommand("install", "-d", "-m", "700", "-o", QuoteString(login_user), UPLOAD_STAGING_DIR)
    yield FileUploadCommand(content, remote_path, remote_temp_filename=staged)


def _mode_matches(current: dict, mode: str) -> bool:
    return int(str(current.get("mode")), 8) == int(mode, 8) if current.get("mode") is not None else False


def _owner_matches(current: dict, user: str, group: str) -> bool:
    return current.get("user") == user and current.get("group") == group


def _log_diff(dest: str, content: str, exists: bool) -> None:
    old_lines: list[str] = []
    if exists:
        old_lines = [f"{line}\n" for line in host.get_fact(FileContents, path=dest) or []]
    host.log(f"Will {'modify' if exists else 'create'} {dest}", logger.info)
    for line in generate_color_diff(old_lines, content.splitlines(keepends=True)):
        logger.info("  %s", line)
    logger.info("")
