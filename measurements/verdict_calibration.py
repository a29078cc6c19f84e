"""How often the verdicts claim a change, on seeded synthetic repeats at each shipped profile's own cells, judged
metrics and repeats (no asserting: it prints; tests/unit/test_verdict.py holds the bounds).

SYNTHETIC samples (tests/bench_support/synthetic.py): log-normal repeats with the given relative noise, every
judged metric moved by the shift in its better direction. Printed per profile, noise and shift: the share of
draws judged better, worse (regression), and either; at shift 0 (an A/A test) every claim is false.
Noise 2 % is GPU-like (rig-facts §2.5: 194.0 ± 2.8 tok/s over 3 runs); 30 % is a loaded 2-core sandbox (the
recorded sandbox runs in tests/fixtures/recipes/ spread 35-60 %). A tournament pools its start's two runs; a driver
update compares one bench with one.

    .venv/bin/python measurements/verdict_calibration.py [--draws 1000] [--profiles sandbox,4x-threadripper]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rigforge.profile.loader import load_profile  # noqa: E402
from rigforge.updates.comparison import RegressionPolicy  # noqa: E402
from tests.bench_support.synthetic import claim_rates, profile_questions  # noqa: E402

PROFILES = ("sandbox", "2x-pix", "4x-threadripper", "8x-turin")
NOISES = (0.02, 0.30)
SHIFTS = (0.0, 0.05, 0.10, 0.20, 0.40)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    print("| profile | cells x judged metrics, repeats | comparison | noise | shift | better | worse | either |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.profiles.split(","):
        profile = load_profile(name)
        questions = len(profile_questions(profile, random.Random(0), 0.02, 0.0, False))
        cells = len(profile.bench.concurrency) * len(profile.bench.input_tokens)
        primary = RegressionPolicy.from_profile(profile).primary
        shape = (f"{cells} cells, {questions} judged, {profile.bench.repeats} repeats; "
                 f"primary {primary.metric if primary else '-'}")
        for start_again, what in ((True, "tournament"), (False, "driver update")):
            for noise in NOISES:
                for shift in SHIFTS:
                    rates = claim_rates(profile, noise, shift, args.draws, args.seed, start_again)
                    print(f"| {name} | {shape} | {what} | {noise:.0%} | {shift:.0%} | {rates.better:.1%} | "
                          f"{rates.worse:.1%} | {rates.claimed:.1%} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
