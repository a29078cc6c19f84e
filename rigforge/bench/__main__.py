"""Command line: ``python3 -m rigforge.bench --config config.json --out result.json``.

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
from rigforge.bench.runner import run_bench, summary_line
from rigforge.bench.transport import ApiKeyError, use_api_key_file

EXIT_OK, EXIT_UNUSABLE, EXIT_CHECKS_FAILED = 0, 1, 2


def write_result(result: dict[str, Any], out_path: Path) -> None:
    """Write the result JSON atomically, so a reader never sees half a file."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    temporary = out_path.with_name(out_path.name + ".tmp")
    temporary.write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    os.replace(temporary, out_path)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the benchmark, write the result, print a one-line summary."""
    parser = argparse.ArgumentParser(prog="python3 -m rigforge.bench", description="LLM server smoke benchmark")
    parser.add_argument("--config", required=True, type=Path, help="JSON file with BenchConfig fields")
    parser.add_argument("--out", required=True, type=Path, help="where to write the result JSON")
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
    try:
        write_result(result, args.out)
    except OSError as error:
        print(f"bench: cannot write {args.out}: {error}", file=sys.stderr)
        return EXIT_UNUSABLE
    print(summary_line(result, str(args.out)), file=sys.stderr)
    return EXIT_OK if result["status"] == "ok" else EXIT_CHECKS_FAILED


if __name__ == "__main__":
    sys.exit(main())
