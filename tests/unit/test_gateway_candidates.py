"""The candidates' latency rounds (measurements/gateway_candidates.py): every path warmed before it is counted,
the paths visited in a rotating order, each gateway's time divided by the engine's in the same round.

Run with a stand-in for one round along a path (no engine, no gateway): what is checked is the schedule and the
arithmetic, the measurement itself being the script's run.
"""

from __future__ import annotations

import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "measurements" / "gateway_candidates.py"
interleaved_latency = runpy.run_path(str(SCRIPT))["interleaved_latency"]
PATHS = {"direct": ("http://d", None, "m"), "haproxy": ("http://h", "k", "m"), "smg": ("http://s", "k", "m")}
SECONDS = {"http://d": 1.0, "http://h": 1.1, "http://s": 1.5}


def test_every_path_is_warmed_then_measured_in_a_rotating_order() -> None:
    visits: list[str] = []

    def measure(path, clients):
        visits.append(path[0])
        return SECONDS[path[0]]

    interleaved_latency(PATHS, clients=8, rounds=3, warm=2, measure=measure)
    warm, measured = visits[:6], visits[6:]
    assert sorted(warm) == sorted(["http://d", "http://h", "http://s"] * 2)  # each path twice, uncounted
    rounds = [measured[index:index + 3] for index in range(0, 9, 3)]
    assert [round_[0] for round_ in rounds] == ["http://d", "http://h", "http://s"]  # no path always first


def test_each_gateway_is_divided_by_the_engine_of_its_own_round() -> None:
    calls: list[str] = []

    def measure(path, clients):  # the warm rounds on a fast machine, the measured ones on one twice as slow
        calls.append(path[0])
        return SECONDS[path[0]] * (1 if len(calls) <= 6 else 2)

    ratios, straight = interleaved_latency(PATHS, clients=1, rounds=3, warm=2, measure=measure)
    assert straight == 2.0  # the warm rounds are not in it
    assert abs(ratios["haproxy"] - 1.1) < 1e-9 and abs(ratios["smg"] - 1.5) < 1e-9
