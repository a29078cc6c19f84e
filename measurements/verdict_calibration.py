"""How often the verdicts claim a change, on seeded synthetic engine starts at each shipped profile's own cells,
judged metrics, repeats and starts a side (no asserting: it prints; tests/unit/test_verdict.py holds the bounds).

SYNTHETIC samples (tests/bench_support/synthetic.py): every engine start draws one offset (sd 0, 2, 5 or 15 %; 15 %
is the autotuner spread of rig-facts §8.4) shared by every cell and metric of that start, and every repeat inside
it adds its own noise (2 % on a GPU profile; on the sandbox 5 %, an idle 2-core box, and 30 %, a loaded one).
rig-facts §2.5's 194.0 ± 2.8 tok/s over three server restarts puts a GPU rig's start-to-start offset near 1.5 %.
Shifts: 0 (an A/A test: every claim is false), 0.1 % inside the smallest tolerance of the judged metrics (-4.9 %
at 5 %, -9.9 % on the sandbox, whose tolerances are 10 % and more: a "worse" is false) and +20 % (a "better" is
right). A tournament holds a start and two recipes identical to it and counts a claim for either (for +20 %: each
recipe found), run as
roles/recipes_decide.py runs it: where the profile's budget affords extra rounds, two looks at half the
false-claim rate each, the plan's extra rounds of every recipe without a claim between them, and a better
verdict confirmed in k new starts a side (tests/bench_support/synthetic.py, tournament_verdicts); a driver
update is one comparison of k starts a side. ``sandbox-one-cell`` is the sandbox with the one-cell bench of
measurements/recipes_aa.py --one-cell (its budget affords more extra rounds), at the 3.5 % repeat noise measured
there.

    .venv/bin/python measurements/verdict_calibration.py [--draws 1000] [--profiles sandbox,2x-pix] [--starts 3]
    .venv/bin/python measurements/verdict_calibration.py --what-k-buys 2,3,4,5,8 --profiles 2x-pix,4x-threadripper

``--what-k-buys`` prints, for driver updates at the profile's (first) repeat noise, A/A claims, A/A judged same and
+20 % found at each k instead.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rigforge.profile import Profile  # noqa: E402
from rigforge.profile.loader import load_profile  # noqa: E402
from rigforge.recipes.rounds import extra_rounds, looks  # noqa: E402
from rigforge.updates.comparison import RegressionPolicy  # noqa: E402
from tests.bench_support import synthetic  # noqa: E402
from tests.bench_support.synthetic import DRIVER_UPDATE, TOURNAMENT, claim_rates, judged_grid  # noqa: E402

#: sandbox-one-cell: the sandbox with the one-cell bench of measurements/recipes_aa.py --one-cell (more extra
#: rounds fit its budget), at the repeat noise measured there on a quiet machine (3.5 %).
PROFILES = ("sandbox", "sandbox-one-cell", "2x-pix", "4x-threadripper", "8x-turin")
OFFSETS = (0.0, 0.02, 0.05, 0.15)
#: Noise of one repeat: GPU-like on the GPU profiles; an idle and a loaded 2-core box on the sandbox.
NOISES = {"sandbox": (0.05, 0.30), "sandbox-one-cell": (0.035,)}
ONE_CELL_SUFFIX = "-one-cell"
GPU_NOISE = (0.02,)
#: Engine starts a side where a profile names none (bench.verdicts.starts): the documents' 3 restarts.
DEFAULT_STARTS = 3


def calibrated(name: str) -> Profile:
    """The shipped profile ``name``, or with ``-one-cell`` the sandbox A/A runs' one-cell bench."""
    if name.endswith(ONE_CELL_SUFFIX):
        return synthetic.one_cell(load_profile(name.removesuffix(ONE_CELL_SUFFIX)))
    return load_profile(name)


def primary_tolerance(profile: Profile) -> float:
    """The tolerance of the profile's primary (metric, cell), in %."""
    policy = RegressionPolicy.from_profile(profile)
    primary = policy.primary
    found = policy.tolerance(primary.metric, primary.concurrency, primary.input_tokens) if primary else None
    return found if found is not None else 5.0


def profile_starts(profile: object, override: int | None) -> int:
    """The starts a side the profile measures (``bench.verdicts.starts``), unless overridden."""
    verdicts = getattr(getattr(profile, "bench", None), "verdicts", None)
    return override or getattr(verdicts, "starts", None) or DEFAULT_STARTS


def what_k_buys(names: list[str], counts: list[int], draws: int, seed: int) -> None:
    """A/A claims, A/A judged same and +20 % found per offset and starts a side, driver updates at the profile's
    (first) repeat noise."""
    print("| profile | noise | offset | " + " | ".join(f"k={k}: A/A claimed / same / +20 % found" for k in counts)
          + " |")
    print("|---|---|---|" + "---|" * len(counts))
    for name in names:
        profile = calibrated(name)
        noise = NOISES.get(name, GPU_NOISE)[0]
        for offset in OFFSETS:
            cells = []
            for starts in counts:
                same = claim_rates(profile, noise, offset, 0.0, draws, seed, starts)
                found = claim_rates(profile, noise, offset, 0.20, draws, seed + 2, starts)
                cells.append(f"{same.claimed:.1%} / {same.same:.0%} / {found.better:.1%}")
            print(f"| {name} | {noise:.0%} | {offset:.0%} | " + " | ".join(cells) + " |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--starts", type=int, help="engine starts a side (default: the profile's)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--what-k-buys", help="starts a side to compare, e.g. 2,3,5,8")
    args = parser.parse_args()
    if args.what_k_buys:
        what_k_buys(args.profiles.split(","), [int(k) for k in args.what_k_buys.split(",")], args.draws, args.seed)
        return 0
    print("| profile | grid | comparison | k (looks, extra rounds) | noise | offset | A/A better / worse | A/A same | "
          "just inside the tolerance: worse | +20 %: better |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.profiles.split(","):
        profile = calibrated(name)
        starts = profile_starts(profile, args.starts)
        cells = len(profile.bench.concurrency) * len(profile.bench.input_tokens)
        primary = RegressionPolicy.from_profile(profile).primary
        tolerance = primary_tolerance(profile)
        inside = min(item.tolerance for item in judged_grid(profile)) - 0.1  # inside every judged tolerance
        grid = (f"{cells} cells, {len(judged_grid(profile))} judged, {profile.bench.repeats} repeats; primary "
                f"{primary.metric if primary else '-'} ±{tolerance:g} %")
        for design in (TOURNAMENT, DRIVER_UPDATE):
            plan = (f"{starts} ({looks(profile)}, ≤ {extra_rounds(profile, 1 + synthetic.TOURNAMENT_RECIPES)})"
                    if design == TOURNAMENT and looks(profile) > 1 else f"{starts} (1)")
            for noise in NOISES.get(name, GPU_NOISE):
                for offset in OFFSETS:
                    same = claim_rates(profile, noise, offset, 0.0, args.draws, args.seed, starts, design)
                    loss = claim_rates(profile, noise, offset, -inside / 100, args.draws, args.seed + 1, starts,
                                       design)
                    found = claim_rates(profile, noise, offset, 0.20, args.draws, args.seed + 2, starts, design)
                    print(f"| {name} | {grid} | {design} | {plan} | {noise:.1%} | {offset:.0%} | "
                          f"{same.better:.1%} / {same.worse:.1%} | {same.same:.0%} | "
                          f"-{inside:g} %: {loss.worse:.1%} | {found.better:.1%} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
