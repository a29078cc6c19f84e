"""``python -m rigforge.updates.compare``: compare two bench results, print the table, write a PNG.

Usage::

    python -m rigforge.updates.compare results/rig2x-a/20261122T031455Z results/rig2x-a/20261123T041000Z
    python -m rigforge.updates.compare --host rig2x-a [--results results]   # latest vs the last run on another driver

Exit status: 0 better, same or cannot tell, 1 worse (regression), 2 bad input (one line on stderr).
The tolerance comes from the profile the after-result was measured with (``--profile`` overrides).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rigforge.updates.compare_render import render_markdown, render_plot
from rigforge.updates.comparison import RegressionPolicy, compare
from rigforge.updates.history import last_before_driver_change, load_result


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m rigforge.updates.compare", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="BEFORE and AFTER run directories (or result.json)")
    parser.add_argument("--host", help="compare this host's latest run with its last run on another driver")
    parser.add_argument("--results", type=Path, default=Path("results"), help="results folder (default: results)")
    parser.add_argument("--profile", help="profile whose bench.regression_tolerance applies (default: the result's)")
    parser.add_argument("--png", type=Path, help="plot path (default: <after run>/compare-<before run>.png)")
    args = parser.parse_args(argv)
    if bool(args.host) == bool(args.runs) or (args.runs and len(args.runs) != 2):
        parser.error("give either two run directories (BEFORE AFTER) or --host HOST")
    return args


def pick_runs(args: argparse.Namespace) -> tuple[Path, Path]:
    """The (before, after) run directories the arguments name."""
    if args.runs:
        return args.runs[0], args.runs[1]
    pair = last_before_driver_change(args.results, args.host)
    if pair is None:
        raise FileNotFoundError(
            f"{args.results / args.host}: no run on another driver version before the latest one to compare with"
        )
    return pair


def main(argv: Sequence[str] | None = None) -> int:
    """Print the comparison table and the one-line verdict; 1 on regression."""
    from rigforge.profile.loader import ProfileError, load_profile

    args = parse_args(argv)
    try:
        before_run, after_run = pick_runs(args)
        before, after = load_result(before_run), load_result(after_run)
        profile_name = args.profile or (after.get("metadata") or {}).get("profile")
        if not profile_name:
            raise ProfileError(f"{after_run}: result names no profile; pass --profile")
        policy = RegressionPolicy.from_profile(load_profile(profile_name))
    except (FileNotFoundError, ValueError, ProfileError) as exc:
        print(f"rigforge.updates.compare: {exc}", file=sys.stderr)
        return 2
    comparison = compare(before, after, policy)
    print(f"before: {before_run}\nafter:  {after_run}\n")
    print(render_markdown(comparison))
    run_dir = after_run if after_run.is_dir() else after_run.parent
    before_name = (before_run if before_run.is_dir() else before_run.parent).name
    png = render_plot(comparison, args.png or run_dir / f"compare-{before_name}.png")
    print(f"plot: {png}")
    return 1 if comparison.regressed else 0


if __name__ == "__main__":
    sys.exit(main())
