"""How often the verdicts claim a change, say same or cannot tell, on seeded synthetic engine starts at each shipped
profile's own cells, judged metrics and repeats (no asserting: it prints; tests/unit/test_verdict.py holds bounds).

SYNTHETIC samples (tests/bench_support/synthetic.py): every engine start draws one offset (sd 0, 2, 5 or 15 %; 15 %
is the autotuner spread of rig-facts §8.4) shared by every cell and metric of that start, and every repeat inside
it adds its own noise (2 % and 3.5 % a repeat: GPU-like and the sandbox's quiet-machine spread). rig-facts §2.5's
194.0 ± 2.8 tok/s over three server restarts puts a GPU rig's start-to-start offset near 1.5 %.

**Driver updates** measure the k starts a side the project's own sizing chooses (rigforge.updates.sizing.
plan_starts, within the profile's driver_update.starts_budget_s) at the spread the rig's last measured change
would have measured: here the true start-to-start spread of the primary, sqrt(offset^2 + noise^2 / repeats); the
minutes are the plan's. Rows: A/A (every claim false), one start 40 % slow on the before or the after side of an
A/A, the primary moved by exactly its tolerance either way (the boundary: "same" there is false), by twice its
tolerance down (the loss a rollback exists for: worse, or cannot tell, which stops the rollout), and every other
judged metric moved 1.5 times its own tolerance the bad way while the primary stays (same there is false).

**Tournaments** are the A/A one of docs/recipes.md at the profile's k (bench.verdicts.starts), run as the code runs
it: a start and two recipes identical to it, a claim for either counts (confirmed or not); where the profile looks
twice, the first look at its O'Brien-Fleming-like share of the rate, the extra rounds the plan affords for every
recipe without a claim, the second look at the rest; then a better confirmed in k new starts a side. "+20 %:
better" counts only confirmed finds; every other better is labelled unconfirmed in the report.

    .venv/bin/python measurements/verdict_calibration.py [--draws 1000] [--profiles sandbox,2x-pix] [--noises 0.02]
    .venv/bin/python measurements/verdict_calibration.py --what-k-resolves 2,3,4,5,6,8,12
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rigforge.bench_runs.starts import minutes  # noqa: E402
from rigforge.profile import Profile  # noqa: E402
from rigforge.profile.loader import load_profile  # noqa: E402
from rigforge.recipes.rounds import extra_rounds, look_rates  # noqa: E402
from rigforge.updates.resolution import resolution  # noqa: E402
from rigforge.updates.sizing import Spread, StartsPlan, plan_starts, primary_tolerance  # noqa: E402
from tests.bench_support import synthetic  # noqa: E402
from tests.bench_support.synthetic import DRIVER_UPDATE, TOURNAMENT, claim_rates, judged_grid  # noqa: E402

PROFILES = ("sandbox", "2x-pix", "4x-threadripper", "8x-turin")
OFFSETS = (0.0, 0.02, 0.05, 0.15)
#: Noise of one repeat: GPU-like, and the sandbox's measured on a quiet machine (measurements/recipes_aa.py).
NOISES = (0.02, 0.035)
#: One bad start: 40 % slow (log units of slowness).
BAD_START = -math.log(0.6)
#: Other judged metrics moved this many times their own tolerance the bad way, the primary unchanged.
OTHERS_PAST = 1.5


def planned(profile: Profile, noise: float, offset: float) -> StartsPlan:
    """The driver update's k, chosen by the project's sizing at the true start-to-start spread of the primary."""
    spread = math.sqrt(offset ** 2 + noise ** 2 / profile.bench.repeats)
    return plan_starts(profile, Spread(spread, "the true spread (calibration)"))


def others_shift(profile: Profile) -> float:
    """A shift past every non-primary judged metric's tolerance, the bad way (the smallest of them x OTHERS_PAST
    would stay inside a larger one, so the largest)."""
    others = [item.tolerance for item in judged_grid(profile) if not item.primary]
    return -OTHERS_PAST * max(others, default=0.0) / 100.0


def signature(profile: Profile, noises: list[float], offsets: list[float]) -> tuple[object, ...]:
    """Everything the rows of a profile depend on: two profiles alike in all of it print the same rows."""
    verdicts = profile.bench.verdicts
    return (tuple(judged_grid(profile)), profile.bench.repeats, verdicts.starts, verdicts.false_claim_rate,
            look_rates(profile), extra_rounds(profile, 1 + synthetic.TOURNAMENT_RECIPES),
            tuple(planned(profile, noise, offset).starts for noise in noises for offset in offsets))


def driver_row(name: str, profile: Profile, noise: float, offset: float, draws: int, seed: int) -> str:
    plan = planned(profile, noise, offset)
    k, tolerance = plan.starts, primary_tolerance(profile)

    def rates(shift: float, others: float | None = None, bad: tuple[float, str] = (0.0, "after"),
              offset_seed: int = 0) -> synthetic.Rates:
        return claim_rates(profile, noise, offset, shift, draws, seed + offset_seed, k, DRIVER_UPDATE,
                           others=others, bad=bad)

    same = rates(0.0)
    bad_before, bad_after = rates(0.0, bad=(BAD_START, "before"), offset_seed=1), rates(0.0, bad=(BAD_START, "after"),
                                                                                       offset_seed=2)
    down, up = rates(-tolerance, 0.0, offset_seed=3), rates(tolerance, 0.0, offset_seed=4)
    lost = rates(-2 * tolerance, 0.0, offset_seed=5)
    moved = rates(0.0, others_shift(profile), offset_seed=6)
    capped = ", capped" if plan.capped else ""
    return (f"| {name} | {noise:.1%} | {offset:.0%} | {k} ({minutes(plan.seconds)}{capped}) | "
            f"{same.better:.1%} / {same.worse:.1%} | {same.same:.0%} | "
            f"{bad_before.claimed:.1%} / {bad_before.same:.0%} ; {bad_after.claimed:.1%} / {bad_after.same:.0%} | "
            f"{down.worse:.1%} / {down.same:.1%} | {up.better:.1%} / {up.same:.1%} | "
            f"{lost.worse:.1%} / {lost.stopped:.1%} | {moved.same:.1%} |")


def tournament_row(name: str, profile: Profile, noise: float, offset: float, draws: int, seed: int) -> str:
    k, tolerance = profile.bench.verdicts.starts, primary_tolerance(profile)
    same = claim_rates(profile, noise, offset, 0.0, draws, seed, k, TOURNAMENT)
    bad = claim_rates(profile, noise, offset, 0.0, draws, seed + 1, k, TOURNAMENT, bad=(BAD_START, "before"))
    lost = claim_rates(profile, noise, offset, -2 * tolerance, draws, seed + 5, k, TOURNAMENT, others=0.0)
    found = claim_rates(profile, noise, offset, 0.20, draws, seed + 7, k, TOURNAMENT, others=0.0)
    rates = " then ".join(f"{rate:.2g}" for rate in look_rates(profile))
    plan = f"{k} ({rates}; ≤ {extra_rounds(profile, 1 + synthetic.TOURNAMENT_RECIPES)} extra rounds)"
    return (f"| {name} | {noise:.1%} | {offset:.0%} | {plan} | {same.better:.1%} / {same.worse:.1%} | "
            f"{same.same:.0%} | {bad.claimed:.1%} / {bad.same:.0%} | {lost.worse:.1%} | {found.better:.1%} |")


DRIVER_HEAD = ("| profile | noise | offset | k (minutes) | A/A better / worse | A/A same | one start 40 % slow, "
               "before ; after: claimed / same | -tol: worse / same | +tol: better / same | -2 x tol: worse / "
               "stopped | others past their tol: same |\n|---|---|---|---|---|---|---|---|---|---|---|")
TOURNAMENT_HEAD = ("| profile | noise | offset | k (look rates; extra rounds) | A/A better / worse | A/A same | "
                   "one start 40 % slow: claimed / same | -2 x tol: worse | +20 %: confirmed better |\n"
                   "|---|---|---|---|---|---|---|---|---|")


def what_k_resolves(counts: list[int], spreads: list[float]) -> None:
    """The resolution at a 5 % tolerance and the primary's share of the default rate (0.025), 80 % power: the
    smallest loss called worse / the narrowest same margin, per starts a side and spread (no draws: the
    resolution is computed as the verdict decides, rigforge.updates.resolution)."""
    print("| start-to-start spread | " + " | ".join(f"k={k}: worse from / same within" for k in counts) + " |")
    print("|---|" + "---|" * len(counts))
    for spread in spreads:
        cells = [resolution(k, k, spread, 0.05, 0.025) for k in counts]
        print(f"| {spread:.1%} | " + " | ".join(f"-{r.smallest_worse:.1%} / ±{r.same_margin:.1%}" for r in cells)
              + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--noises", default=",".join(map(str, NOISES)))
    parser.add_argument("--offsets", default=",".join(map(str, OFFSETS)))
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--only", choices=(DRIVER_UPDATE, TOURNAMENT), help="one design's table only")
    parser.add_argument("--tournament-noises", help="the tournaments' repeat noises (default: --noises)")
    parser.add_argument("--even-looks", action="store_true",
                        help="split the two looks' rate evenly (the older Bonferroni halves), to compare the splits")
    parser.add_argument("--what-k-resolves", help="print the resolution at these starts a side only, e.g. 3,5,8")
    args = parser.parse_args()
    if args.what_k_resolves:
        what_k_resolves([int(k) for k in args.what_k_resolves.split(",")], [0.01, 0.02, 0.035, 0.05, 0.10, 0.15])
        return 0
    if args.even_looks:
        def even(profile: Profile, rate: float | None = None) -> tuple[float, ...]:
            split = look_rates(profile, rate)
            return tuple(sum(split) / len(split) for _ in split)
        synthetic.look_rates = even  # the tournaments' looks only; the printed plan keeps the profile's split
    names, noises = args.profiles.split(","), [float(value) for value in args.noises.split(",")]
    offsets = [float(value) for value in args.offsets.split(",")]
    began = time.monotonic()
    tournament_noises = [float(value) for value in (args.tournament_noises or args.noises).split(",")]
    for design, head, row in ((DRIVER_UPDATE, DRIVER_HEAD, driver_row), (TOURNAMENT, TOURNAMENT_HEAD, tournament_row)):
        if args.only and args.only != design:
            continue
        print(f"\n{design}s, {args.draws} draws a cell\n\n{head}", flush=True)
        seen: dict[tuple[object, ...], str] = {}
        for name in names:
            profile = load_profile(name)
            same_as = seen.setdefault(signature(profile, noises, offsets), name)
            if same_as != name:
                print(f"| {name} | = {same_as}: the same judged grid, tolerances, repeats, k and looks, so the same "
                      "seeded draws give the same rows |", flush=True)
                continue
            for noise in noises if design == DRIVER_UPDATE else tournament_noises:
                for offset in offsets:
                    print(row(name, profile, noise, offset, args.draws, args.seed), flush=True)
    print(f"\n({time.monotonic() - began:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
