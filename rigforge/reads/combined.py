"""Many fact reads as one remote command: one section per fact, split and parsed by each fact's own parser.

    reads = [FactRead.of(File, path="/etc/rigforge/profile.json"), FactRead.of(DebPackages)]
    marker = new_marker()
    status, output = host.run_shell_command(combined_command(reads, marker))
    for read, section in zip(reads, split_sections(output.stdout_lines, reads, marker)):
        served, value = section_value(read, section)

The output of each read is framed by two marker lines (the marker carries a random nonce, so no fact's
output can forge one)::

    @@rigforge-read-1f2e3d4c 0
    ...the fact command's stdout...
    @@rigforge-read-1f2e3d4c 0 end 0          <- its exit status

A section that is missing, out of order or unterminated is a ``CombinedReadError`` naming the fact:
never an empty value. A section pyinfra would not have turned into a value without side effects (a
non-zero status, its missing-command marker, a parser error) is not served: the caller reads that
fact on its own, so pyinfra logs, fails or defaults exactly as it always does.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from importlib import import_module
from inspect import getcallargs
from typing import Any

from pyinfra.api import StringCommand
from pyinfra.api.facts import _MISSING_COMMAND_MARKER as MISSING_COMMAND_MARKER  # what its guard prints
from pyinfra.api.facts import FactBase

MARKER_PREFIX = "@@rigforge-read-"


class CombinedReadError(RuntimeError):
    """The combined output does not hold a well-formed section for a fact."""


@dataclass(frozen=True)
class FactRead:
    """One fact read: the fact class and its keyword arguments, bound as pyinfra binds them."""

    fact: type[FactBase]
    kwargs_json: str = "{}"

    @classmethod
    def of(cls, fact: type[FactBase], *args: Any, **kwargs: Any) -> FactRead:
        """The read ``host.get_fact(fact, *args, **kwargs)`` makes (positional arguments bound by name).

        Raises ``TypeError`` for arguments that do not fit the fact's command or are not JSON values.
        """
        bound = getcallargs(fact().command, *args, **kwargs) if args or kwargs else {}
        bound.pop("self", None)
        return cls(fact, json.dumps(bound, sort_keys=True))

    @property
    def kwargs(self) -> dict[str, Any]:
        return json.loads(self.kwargs_json)

    @property
    def name(self) -> str:
        """``File(path=/etc/x)``: how errors name the read."""
        arguments = ", ".join(f"{key}={value}" for key, value in self.kwargs.items())
        return f"{self.fact.__name__}({arguments})"

    def to_record(self) -> dict[str, Any]:
        return {"fact": f"{self.fact.__module__}:{self.fact.__qualname__}", "kwargs": self.kwargs}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> FactRead:
        """The read a ``to_record`` dict names; ``ValueError`` when its fact no longer exists."""
        module_name, _, class_name = str(record.get("fact", "")).partition(":")
        try:
            fact = getattr(import_module(module_name), class_name)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ValueError(f"no fact {record.get('fact')!r}") from exc
        if not (isinstance(fact, type) and issubclass(fact, FactBase)):
            raise ValueError(f"{record.get('fact')!r} is not a fact")
        return cls.of(fact, **dict(record.get("kwargs") or {}))

    def instance(self) -> tuple[FactBase, Any]:
        """A fact instance whose ``command()`` was called (some parsers keep what it computed) and the command."""
        fact = self.fact()
        command = fact.command(**self.kwargs) if callable(fact.command) else fact.command
        return fact, command

    def command(self) -> Any:
        """The fact's command, guarded by its required command as pyinfra guards it."""
        fact, command = self.instance()
        required = fact.requires_command(**self.kwargs) if callable(fact.requires_command) else fact.requires_command
        if not required:
            return command
        return StringCommand("if", "command", "-v", required, ">/dev/null", "2>&1;", "then", "(", command, ");",
                             "else", "echo", f"'{MISSING_COMMAND_MARKER}';", "fi")


@dataclass
class Section:
    """What one read printed, and its exit status."""

    lines: list[str] = field(default_factory=list)
    status: int = 0


def new_marker() -> str:
    """A marker no fact output contains by chance (random per combined command)."""
    return MARKER_PREFIX + secrets.token_hex(4)


#: The most command text one combined read sends. sshd refuses a packet over 256 KiB ("Bad packet length", and the
#: connection is gone) and Linux an argument over 128 KiB (sshd runs the command as ``sh -c COMMAND``): a rig's
#: recorded reads are split into commands under this, and a read longer on its own is left to pyinfra.
COMMAND_BUDGET = 64 * 1024


def command_length(read: FactRead) -> int:
    """How many bytes of command text ``read`` adds to a combined command (its framing included)."""
    command = read.command()
    text = command.get_raw_value() if isinstance(command, StringCommand) else str(command)
    return len(text.encode()) + 96


def batches(reads: list[FactRead], lengths: list[int], budget: int | None = None) -> list[list[FactRead]]:
    """``reads`` in order, cut into runs whose ``lengths`` add up to at most ``budget``; a read longer than the
    budget alone is left out (pyinfra reads it on its own).

    >>> from pyinfra.facts.server import Hostname
    >>> reads = [FactRead.of(Hostname) for _ in range(4)]
    >>> [len(batch) for batch in batches(reads, [40, 40, 90, 30], budget=80)]
    [2, 1]
    """
    budget = COMMAND_BUDGET if budget is None else budget
    cut: list[list[FactRead]] = []
    used = budget + 1
    for read, length in zip(reads, lengths, strict=True):
        if length > budget:
            continue
        if used + length > budget:
            cut.append([])
            used = 0
        cut[-1].append(read)
        used += length
    return cut


def combined_command(reads: list[FactRead], marker: str) -> StringCommand:
    """One shell command printing every read's output in its own section (stderr dropped: a failed
    section is read again on its own, where pyinfra shows it)."""
    bits: list[Any] = []
    for index, read in enumerate(reads):
        bits += ["printf", "'%s\\n'", f"'{marker} {index}';", "(", read.command(), ")", "2>/dev/null;",
                 "printf", "'\\n%s %s\\n'", f"'{marker} {index} end'", '"$?";']
    return StringCommand(*bits)


def split_sections(lines: list[str], reads: list[FactRead], marker: str) -> list[Section]:
    """The sections of a combined output, one per read in order; ``CombinedReadError`` names the first
    read whose section is missing or garbled."""
    sections: list[Section] = []
    position = 0
    for index, read in enumerate(reads):
        start, end_prefix = f"{marker} {index}", f"{marker} {index} end "
        if position >= len(lines) or lines[position] != start:
            seen = lines[position] if position < len(lines) else "end of output"
            raise CombinedReadError(f"no section for fact {read.name} (expected its start, found {seen[:80]!r})")
        position += 1
        body: list[str] = []
        while position < len(lines) and not lines[position].startswith(marker):
            body.append(lines[position])
            position += 1
        if position >= len(lines) or not lines[position].startswith(end_prefix):
            raise CombinedReadError(f"the section of fact {read.name} is not terminated")
        status = lines[position][len(end_prefix):].strip()
        if not status.isdigit():
            raise CombinedReadError(f"the section of fact {read.name} ends without an exit status ({status!r})")
        position += 1
        if body and body[-1] == "":
            body.pop()  # the newline the end marker's printf adds before itself
        sections.append(Section(body, int(status)))
    if position != len(lines):
        raise CombinedReadError(f"unexpected output after the last fact's section ({lines[position][:80]!r})")
    return sections


def section_value(read: FactRead, section: Section) -> tuple[bool, Any]:
    """``(True, value)`` as pyinfra would have parsed this output; ``(False, None)`` when pyinfra must read
    the fact itself (failed, missing command, parser error: its own logging and failure rules apply)."""
    if section.status != 0 or section.lines == [MISSING_COMMAND_MARKER]:
        return False, None
    fact, _ = read.instance()
    if not section.lines:
        return True, fact.default()
    try:
        return True, fact.process(section.lines)
    except Exception:  # noqa: BLE001 - any parser failure is pyinfra's to report, on its own read
        return False, None
