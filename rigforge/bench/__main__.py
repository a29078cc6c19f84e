"""Command line: ``python3 -m rigforge.bench --config config.json --out result.json [--syslog]``.

``--syslog``: each failed probe's and cell's line also goes to syslog (the rig's journal) as
``rigforge-bench``, where the known-failure readers (the doctor, the known-failures check) find it.

Exit status: 0 every check passed; 2 the run finished but a check failed (the result file
says which); 1 the configuration or the output file was unusable.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from rigforge.bench.config import ConfigError, load_config
from rigforge.bench.runner import failure_lines, run_bench, summary_line
from rigforge.bench.transport import ApiKeyError, use_api_key_file

EXIT_OK, EXIT_UNUSABLE, EXIT_CHECKS_FAILED = 0, 1, 2
#: The syslog identifier of the bench's failure lines (journalctl SYSLOG_IDENTIFIER=rigforge-bench).
SYSLOG_IDENT = "rigforge-bench"


def write_result(result: dict[str, Any], out_path: Path) -> None:
    """Write the result JSON atomically, so a reader never sees half a file."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    temporary = out_path.with_name(out_path.name + ".tmp")
    temporary.write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    os.replace(temporary, out_path)


def log_failures(lines: list[str]) -> None:
    """Send each line to syslog as ``rigforge-bench`` (warning); silently nothing where syslog is absent."""
    import syslog  # Unix only, and only wanted on the rig

    syslog.openlog(SYSLOG_IDENT, 0, syslog.LOG_USER)
    for line in lines:
        syslog.syslog(syslog.LOG_WARNING, line)
    syslog.closelog()


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the benchmark, write the result, print a one-line summary."""
    parser = argparse.ArgumentParser(prog="python3 -m rigforge.bench", description="LLM server smoke benchmark")
    parser.add_argument("--config", required=True, type=Path, help="JSON file with BenchConfig fields")
    parser.add_argument("--out", required=True, type=Path, help="where to write the result JSON")
    parser.add_argument("--syslog", action="store_true", help=f"also send failure lines to syslog as {SYSLOG_IDENT}")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as error:
        print(f"bench: bad config: {error}", file=sys.stderr)
        return EXIT_UNUSABLE
    try:
        if config.api_key_file:
            use_api_key_file(config.api_key_file)
    except ApiKeyError as error:
        print(f"bench: {error}", file=sys.stderr)
        return EXIT_UNUSABLE
    result = run_bench(config)
    if args.syslog:
        log_failures(failure_lines(result))
    try:
        write_result(result, args.out)
    except OSError as error:
        print(f"bench: cannot write {args.out}: {error}", file=sys.stderr)
        return EXIT_UNUSABLE
    print(summary_line(result, str(args.out)), file=sys.stderr)
    return EXIT_OK if result["status"] == "ok" else EXIT_CHECKS_FAILED


if __name__ == "__main__":
    sys.exit(main())
