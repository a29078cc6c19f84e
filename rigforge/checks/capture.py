"""Fact outputs saved as files, and the checks re-run on them without the host.

A capture folder holds ``fact-<FactName>.txt``: the exact stdout of each fact's command (the same
layout as tests/fixtures/gpu). ``save_capture`` writes one on the machine it runs on (the lent GPU
machine, a rig); ``read_capture`` parses one with the facts' own parsers, so the table of a rig can
be rebuilt anywhere:

    python -m rigforge.checks.capture save DIR          # on the rig, as root
    python -m rigforge.checks.capture show DIR 2x-pix   # anywhere: the preflight table for that capture
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from rigforge.checks.model import HostFacts
from rigforge.checks.run import FACT_SOURCES, run_checks, summary
from rigforge.checks.table import table_lines

FACT_FILE = "fact-{name}.txt"


def save_capture(folder: Path) -> list[Path]:
    """Run every fact command here (sh, as pyinfra's @local does) and save its stdout; returns the files."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for fact in FACT_SOURCES.values():
        instance = fact()
        command = instance.command()
        required = instance.requires_command()
        if required:
            command = f"if command -v {required} >/dev/null 2>&1; then ( {command} ); fi"
        result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False)
        path = folder / FACT_FILE.format(name=fact.__name__)
        path.write_text(result.stdout)
        written.append(path)
    return written


def read_capture(folder: Path, aliases: Mapping[str, str] | None = None) -> HostFacts:
    """Parse a capture folder into HostFacts; a missing file gives the fact's 'absent' value.

    + aliases: fact name -> file name, for captures that saved a plain command's output under its own
      name (e.g. NvidiaLoadedDriver -> proc-driver-nvidia-version.txt)
    """
    values = {}
    for field, fact in FACT_SOURCES.items():
        name = (aliases or {}).get(fact.__name__, FACT_FILE.format(name=fact.__name__))
        path = folder / name
        lines = path.read_text().splitlines() if path.exists() else []
        # As pyinfra does: no output at all means the fact's default.
        values[field] = fact().process(lines) if lines else fact.default()
    return HostFacts(**values)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "save":
        for path in save_capture(Path(argv[1])):
            print(f"saved {path}")
        return 0
    if len(argv) == 3 and argv[0] == "show":
        from rigforge.profile.loader import load_profile

        checks = run_checks(load_profile(argv[2]), read_capture(Path(argv[1])))
        print("\n".join(table_lines(checks)))
        print(summary(argv[1], checks))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
