"""``python -m rigforge.updates.compare``: compare two bench results, print the table, write a PNG.

Usage::

    python -m rigforge.updates.compare results/rig2x-a/20261122T031455Z results/rig2x-a/20261123T041000Z
    python -m rigforge.updates.compare results/a/T1,results/a/T2,results/a/T3 results/a/T4,results/a/T5,results/a/T6
    python -m rigforge.updates.compare --host rig2x-a [--results results]   # latest vs the last run on another driver

Exit status: 0 better, same or cannot tell, 1 worse (regression), 2 bad input (one line on stderr). After the
table it prints the primary's resolution: what the starts resolve at the spread they measured
(rigforge.updates.resolution), so a "cannot tell" says how far it could see.
The tolerance comes from the profile the after-result was measured with (``--profile`` overrides). A side is one
run directory per engine start, comma-separated: one start a side measures no start-to-start noise, so it
cannot tell (rigforge.updates.comparison).
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
    parser.add_argument("runs", nargs="*", type=Path,
                        help="BEFORE and AFTER run directories (or result.json), each side's starts comma-separated")
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


def starts(side: Path) -> list[Path]:
    """The run directories of one side, one per engine start (``a,b,c``)."""
    return [Path(part) for part in str(side).split(",") if part]


def main(argv: Sequence[str] | None = None) -> int:
    """Print the comparison table and the one-line verdict; 1 on regression."""
    from rigforge.profile.loader import ProfileError, load_profile

    args = parse_args(argv)
    try:
        before_runs, after_runs = (starts(side) for side in pick_runs(args))
        before, after = [load_result(run) for run in before_runs], [load_result(run) for run in after_runs]
        before_run, after_run = before_runs[0], after_runs[0]
        profile_name = args.profile or (after[0].get("metadata") or {}).get("profile")
        if not profile_name:
            raise ProfileError(f"{after_run}: result names no profile; pass --profile")
        policy = RegressionPolicy.from_profile(load_profile(profile_name))
    except (FileNotFoundError, ValueError, ProfileError) as exc:
        print(f"rigforge.updates.compare: {exc}", file=sys.stderr)
        return 2
    comparison = compare(before, after, policy)
    print(f"before: {', '.join(map(str, before_runs))}\nafter:  {', '.join(map(str, after_runs))}\n")
    print(render_markdown(comparison))
    seen = comparison.resolution()
    if seen is not None:  # what these starts could tell apart, whatever the verdict
        print(f"resolution (primary): {seen.describe()}")
    run_dir = after_run if after_run.is_dir() else after_run.parent
    before_name = (before_run if before_run.is_dir() else before_run.parent).name
    png = render_plot(comparison, args.png or run_dir / f"compare-{before_name}.png")
    print(f"plot: {png}")
    return 1 if comparison.regressed else 0


if __name__ == "__main__":
    sys.exit(main())
