"""Secrets on the rig: root-only files in a root-only folder, never shown in arguments, logs or diffs.

A secret given on the machine running pyinfra (an environment variable, or the first line of a file named
by host data) is read inside the operation, compared with the rig's file by sha256 and uploaded only when it
differs; one made on the rig (the engine's API key when none is given) is made there and never leaves it.
Either way the file appears at its path only whole and with mode 0600: it is written beside it (created
empty with that mode first) and renamed.

Example::

    secret_env_file(name="HF token", dest="/etc/rigforge/secrets/hf.env", variable="HF_TOKEN")
    rig_secret_file(name="API key", dest="/etc/rigforge/secrets/engine-api-key", variable="RIGFORGE_API_KEY",
                    show="sudo cat /etc/rigforge/secrets/engine-api-key")
"""

from __future__ import annotations

import hashlib
import io
import os
import posixpath
from collections.abc import Iterator

from pyinfra import host, logger
from pyinfra.api import FileUploadCommand, QuoteString, StringCommand, operation
from pyinfra.facts.files import File, Sha256File

from rigforge.operations.files import upload_commands

#: Bytes of randomness in a key made on the rig: 256 bits, written as 64 hex digits.
KEY_BYTES = 32


@operation()
def secret_env_file(dest: str, variable: str, local_file: str | None = None):
    """
    Write ``VARIABLE=<secret>`` to ``dest`` (mode 0600, folder 0700), the secret read on this machine.

    + dest: env file on the rig
    + variable: the variable name, also the environment variable it is read from here
    + local_file: a file on this machine holding the secret (first line), read instead of the environment

    The secret never appears in arguments, logs or diffs: it is read inside the operation and compared
    by sha256. Without a secret here nothing is written (public repositories need none), and the run says
    so: a file left by an earlier run stays as it is, so a later run needs the secret only to change it.

    **Example:**

    .. code:: python

        secret_env_file(name="HF token", dest="/etc/rigforge/secrets/hf.env", variable="HF_TOKEN")
    """
    secret = read_local_secret(variable, local_file)
    if not secret:
        # Said at the default verbosity (a noop line shows only with -v): a run without the secret must not
        # look like one that checked it.
        kept = "left as it is" if host.get_fact(File, path=dest) else "not written (public repositories need none)"
        host.log(f"no {variable} given on this machine: {dest} {kept}")
        return
    yield from _replace_unless_same(dest, f"{variable}={secret}\n")


@operation()
def rig_secret_file(dest: str, variable: str, show: str, local_file: str | None = None):
    """
    Keep a secret alone on the first line of ``dest`` (mode 0600, folder 0700): the one given here, else one
    made on the rig once and kept.

    + dest: the file on the rig
    + variable: the environment variable on this machine that gives the secret
    + show: the command that shows the secret on the rig, printed instead of the secret
    + local_file: a file on this machine holding the secret (first line), read instead of the environment

    A given secret replaces a different one (one change; compared by sha256). With none given, a file that
    holds a secret is kept as it is, and a missing or empty one gets 256 random bits as 64 hex digits, made
    on the rig from /dev/urandom: that secret never crosses the network. Every run says, at the default
    verbosity, where the secret lives and how to show it there; the secret itself is never printed.

    **Example:**

    .. code:: python

        rig_secret_file(name="API key", dest="/etc/rigforge/secrets/engine-api-key",
                        variable="RIGFORGE_API_KEY", show="sudo cat /etc/rigforge/secrets/engine-api-key")
    """
    secret = read_local_secret(variable, local_file)
    given = f"from {local_file} on this machine" if local_file else f"from {variable} on this machine"
    if secret:
        host.log(f"{dest}: the key {given} (show it on the rig with: {show})")
        yield from _replace_unless_same(dest, secret + "\n")
        return
    current = host.get_fact(File, path=dest)
    if current and current.get("size"):
        host.log(f"no {variable} given on this machine: {dest} kept as it is (show it on the rig with: {show})")
        if _mode(current) != 0o600 or (current.get("user"), current.get("group")) != ("root", "root"):
            yield StringCommand("chown", "root:root", QuoteString(dest))
            yield StringCommand("chmod", "600", QuoteString(dest))
        else:
            host.noop(f"{dest} holds a key")
        return
    host.log(f"no {variable} given on this machine: a new key made on the rig in {dest}, never sent or printed "
             f"(show it on the rig with: {show})")
    temp = _staging_path(dest)
    yield from _private_temp(dest, temp)
    yield StringCommand("od", "-An", "-v", "-tx1", f"-N{KEY_BYTES}", "/dev/urandom", "|",
                        "tr", "-d", QuoteString(" \n"), ">", QuoteString(temp), "&&", "echo", ">>", QuoteString(temp))
    yield StringCommand("mv", "-f", QuoteString(temp), QuoteString(dest))


@operation()
def given_secret_line(dest: str, variable: str, prefix: str, local_file: str | None = None):
    """
    Keep ``PREFIX<secret>`` alone in ``dest`` (mode 0600, folder 0700), the secret read on this machine.

    + dest: the file on the host
    + variable: the environment variable on this machine that gives the secret
    + prefix: text before the secret on its line (an HAProxy map's key: ``rig1 ``)
    + local_file: a file on this machine holding the secret (first line), read instead of the environment

    For a secret another host needs (a rig's engine key on the gateway host): the same source as that rig's
    own copy, compared by sha256, never printed. With none given here, nothing is written and the run says so.

    **Example:**

    .. code:: python

        given_secret_line(name="rig1's key for the gateway", dest="/etc/rigforge/secrets/gateway/rigs/rig1.map",
                          variable="RIGFORGE_API_KEY", prefix="rig1 ", local_file="~/keys/rig1")
    """
    secret = read_local_secret(variable, local_file)
    if not secret:
        host.log(f"no {variable} given on this machine{f' ({local_file})' if local_file else ''}: {dest} not "
                 "written", logger.warning)
        host.noop(f"{dest}: no secret given")
        return
    yield from _replace_unless_same(dest, f"{prefix}{secret}\n")


def read_local_secret(variable: str, local_file: str | None) -> str:
    """The secret on this machine: the first line of ``local_file`` when given, else ``$VARIABLE`` ('' for none)."""
    if local_file:
        with open(os.path.expanduser(local_file), encoding="utf-8") as handle:
            return handle.readline().strip()
    return os.environ.get(variable, "").strip()


def _replace_unless_same(dest: str, content: str) -> Iterator[StringCommand | FileUploadCommand]:
    """Upload ``content`` to ``dest`` unless the rig's file already holds it with mode 0600."""
    wanted = hashlib.sha256(content.encode()).hexdigest()
    current = host.get_fact(File, path=dest)
    if current and host.get_fact(Sha256File, path=dest) == wanted and _mode(current) == 0o600:
        host.noop(f"{dest} is up to date")
        return
    temp = _staging_path(dest)
    yield from _private_temp(dest, temp)
    yield from upload_commands(io.StringIO(content), temp)
    yield StringCommand("mv", "-f", QuoteString(temp), QuoteString(dest))


def _staging_path(dest: str) -> str:
    return f"{dest}.rigforge-new"


def _private_temp(dest: str, temp: str) -> Iterator[StringCommand]:
    """The 0700 folder, and an empty 0600 file beside ``dest`` for the secret to arrive in."""
    yield StringCommand("install", "-d", "-m", "700", QuoteString(posixpath.dirname(dest)))
    yield StringCommand("install", "-m", "600", "/dev/null", QuoteString(temp))


def _mode(info: dict) -> int:
    return int(str(info.get("mode")), 8) if info.get("mode") is not None else -1
