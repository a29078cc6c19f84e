"""Which kernel GRUB boots next, read from the menu grub-mkconfig wrote and GRUB's environment block.

GRUB picks its entry at boot from ``default``: grub.cfg sets it to ``${next_entry}`` when that is set
in /boot/grub/grubenv (``grub-reboot``: this boot only), else to the ``GRUB_DEFAULT`` it was generated
with: an index (``0``, the newest kernel on Debian and Ubuntu), a path into a submenu (``1>2``), an
entry's title or id, or ``${saved_entry}`` (``GRUB_DEFAULT=saved``; ``grub-set-default``). An entry
boots the kernel named on its ``linux`` line. Pure functions on the files' text; no pyinfra.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

_DEFAULT_IN_ELSE = re.compile(r'^\s*set default="?([^"\n]*)"?\s*$')
_LINUX_LINE = re.compile(r"^\s*linux\S*\s+(\S*vmlinuz-(\S+))")


@dataclass
class MenuEntry:
    """A ``menuentry`` (kernel set) or ``submenu`` (children set) of grub.cfg."""

    title: str
    entry_id: str = ""
    kernel: str | None = None
    children: list[MenuEntry] | None = None
    lines: list[str] = field(default_factory=list, repr=False)


def parse_menu(grub_cfg: str) -> list[MenuEntry]:
    """The top-level entries of a grub.cfg, submenus with their own entries."""
    root: list[MenuEntry] = []
    stack: list[MenuEntry] = []
    for line in grub_cfg.splitlines():
        stripped = line.strip()
        words = _words(stripped)
        if words and words[0] in ("menuentry", "submenu") and stripped.endswith("{"):
            entry = MenuEntry(words[1] if len(words) > 1 else "", _entry_id(words),
                              children=[] if words[0] == "submenu" else None)
            siblings = stack[-1].children if stack else root
            if siblings is not None:
                siblings.append(entry)
            stack.append(entry)
        elif stack and stripped == "}":
            stack.pop()
        elif stack and stack[-1].kernel is None and (match := _LINUX_LINE.match(line)):
            stack[-1].kernel = match.group(2)
    return root


def _words(line: str) -> list[str]:
    try:
        return shlex.split(line.rstrip("{"))
    except ValueError:
        return []


def _entry_id(words: list[str]) -> str:
    for flag, value in zip(words, words[1:], strict=False):
        if flag in ("$menuentry_id_option", "--id"):
            return value
    return ""


def parse_grubenv(text: str) -> dict[str, str]:
    """GRUB's environment block: ``name=value`` lines, padded with ``#``."""
    variables: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and not name.startswith("#"):
            variables[name.strip()] = value.strip()
    return variables


def configured_default(grub_cfg: str) -> str:
    """The ``set default=`` that grub.cfg falls back to when no next_entry is set (``0`` if none)."""
    found = "0"
    for line in grub_cfg.splitlines():
        match = _DEFAULT_IN_ELSE.match(line)
        if match and match.group(1) != "${next_entry}":
            found = match.group(1)
    return found


def resolve_entry(menu: list[MenuEntry], spec: str) -> MenuEntry | None:
    """The entry a default spec names: index, title or id, ``>`` separating submenu levels."""
    level: list[MenuEntry] | None = menu
    entry: MenuEntry | None = None
    for part in spec.split(">"):
        if level is None:
            return None
        part = part.strip()
        if part.isdigit():
            entry = level[int(part)] if int(part) < len(level) else None
        else:
            entry = next((item for item in level if part in (item.title, item.entry_id)), None)
        if entry is None:
            return None
        level = entry.children
    return entry


@dataclass(frozen=True)
class NextBoot:
    """The kernel GRUB boots next and how that was decided (for messages)."""

    kernel: str | None
    how: str


def next_boot_kernel(grub_cfg: str, grubenv: str) -> NextBoot:
    """The kernel of the entry GRUB boots next; ``kernel`` None when the menu does not say."""
    variables = parse_grubenv(grubenv)
    spec, how = variables.get("next_entry", ""), "grubenv next_entry"
    if not spec:
        spec, how = configured_default(grub_cfg), "GRUB default"
        if spec == "${saved_entry}":
            spec, how = variables.get("saved_entry") or "0", "grubenv saved_entry"
    entry = resolve_entry(parse_menu(grub_cfg), spec)
    if entry is not None and entry.children is not None:  # a submenu as default boots its first entry
        entry = entry.children[0] if entry.children else None
    return NextBoot(entry.kernel if entry else None, f"{how} {spec!r}")
