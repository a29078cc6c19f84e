"""Run an engine's Python module with its API key, read from a file, never on the process's command line.

Usage (inside the engine's container; the key file and this script are mounted read-only):
    python3 engine_entry.py --api-key-file /run/rigforge/engine-api-key -m sglang.launch_server --port 8000 ...

It reads the key (alone on the file's first line), then runs the module as ``python -m`` would, with
``--api-key KEY`` added to the module's ``sys.argv`` inside this process: ``/proc/PID/cmdline`` (what ``ps``
shows every user) keeps the words this process was started with, which name only the file; nothing puts the
key in an environment variable, so no child process inherits it. vLLM and SGLang log the arguments they
parsed at start (vLLM's "non-default args", SGLang's ``server_args=``), so every line this process writes to
stdout or stderr, and every log record it makes, has the key replaced by ``<api-key>``. Child processes
(started with ``spawn``: their arguments travel through a pipe) are not covered by that mask.

Standard library only; Python 3.9 or later.
"""

from __future__ import annotations

import logging
import runpy
import sys
from collections.abc import Sequence
from typing import Any, TextIO

MASK = "<api-key>"
USAGE = "usage: engine_entry.py --api-key-file FILE -m MODULE [ARG ...]"


class EntryError(Exception):
    """The entry cannot start the engine (bad arguments, an unreadable or empty key file)."""


def parse(argv: Sequence[str]) -> tuple[str, str, list[str]]:
    """(key file, module, the module's arguments) from the entry's own command line."""
    if len(argv) < 4 or argv[0] != "--api-key-file" or argv[2] != "-m":
        raise EntryError(USAGE)
    return argv[1], argv[3], list(argv[4:])


def read_key(path: str) -> str:
    """The key on the first line of ``path``; an error names the file, never its content."""
    try:
        with open(path, encoding="utf-8") as handle:
            key = handle.readline().strip()
    except OSError as error:
        raise EntryError(f"cannot read the API key file {path}: {error.strerror}") from None
    if not key:
        raise EntryError(f"the API key file {path} is empty")
    return key


class MaskedStream:
    """A text stream that writes through to ``stream`` with every occurrence of ``secret`` masked."""

    def __init__(self, stream: TextIO, secret: str) -> None:
        self._stream, self._secret = stream, secret

    def write(self, text: str) -> int:
        self._stream.write(text.replace(self._secret, MASK))
        return len(text)

    def writelines(self, lines: Sequence[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def mask_logging(secret: str) -> None:
    """Make every log record of this process carry its message with ``secret`` masked, whatever handles it."""
    make_record = logging.getLogRecordFactory()

    def masked_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        message = record.getMessage()
        if secret in message:
            record.msg, record.args = message.replace(secret, MASK), None
        return record

    logging.setLogRecordFactory(masked_record)


def main(argv: Sequence[str] | None = None) -> int:
    """Read the key, mask it in this process's output, and run the module with it (returns only on error)."""
    try:
        key_file, module, arguments = parse(sys.argv[1:] if argv is None else argv)
        key = read_key(key_file)
    except EntryError as error:
        print(f"engine_entry: {error}", file=sys.stderr)
        return 2
    sys.stdout = MaskedStream(sys.stdout, key)  # type: ignore[assignment]
    sys.stderr = MaskedStream(sys.stderr, key)  # type: ignore[assignment]
    mask_logging(key)
    sys.argv = [module, *arguments, "--api-key", key]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
