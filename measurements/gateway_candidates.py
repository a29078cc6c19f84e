"""Two gateways side by side in front of the same three real engines, in one run (no asserting).

Starts three llama.cpp servers (xllamacpp, Gemma 3 270M, one thread each) on 127.0.0.1 and the candidates
(tests/bench_support/gateway_candidates.py): HAProxy (Debian's package, the configuration deploys/gateway.py writes)
and SGLang's model gateway (PyPI ``smg``) with the same health-check period, timeout and retries. Prints per
candidate, as ratios to the engine reached directly where a ratio means something:

- added latency at C=1 and C=8: both gateways in front of the same engine at once, every path (the engine straight,
  each gateway) warmed first with rounds that are not counted, then measured in rounds that visit the paths in a
  rotating order, so that no path is measured cold or always first; per round the ratio gateway / direct, the
  median over the rounds;
- requests lost under load (C=6, half streamed) while one engine is killed (SIGKILL), one hung (SIGSTOP), one
  restarted (SIGTERM, started again): non-streamed failed; streams failed before their response headers (a gateway
  can retry those), after them before a token, and after a token (nobody can retry these two);
- how long a returning engine waits, after its /health answers 200, for its first request through the gateway;
- the gateway's memory (RSS) after the load and a soak of cheap requests (``--soak-seconds``: the issue's hour,
  shortened to what one run on a 2-core machine can spend; the requests served are printed beside it);
- installed size (the package and the libraries it brings that Debian 12's base lacks; the wheel and its deps).

    flock /work/coord/e2e.lock .venv/bin/python measurements/gateway_candidates.py [--soak-seconds 30]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rigforge.sandbox.model import ensure_gemma  # noqa: E402
from tests.bench_support.gateway_candidates import (  # noqa: E402
    MODEL,
    Candidate,
    Engine,
    Haproxy,
    Smg,
    returning,
)
from tests.bench_support.gateway_load import Outcome, load, one_request, stream_stage  # noqa: E402
from tests.bench_support.llama_server import free_loopback_port  # noqa: E402

#: A path clients can take to the engine: its address, the key it wants (None: none), the model name it routes by.
GatewayPath = tuple[str, str | None, str]


def one_round(path: GatewayPath, clients: int) -> float:
    """The median time of ``clients`` requests sent at once along ``path``.

    + path: address, key and model name of the path
    + clients: how many requests at once
    """
    url, key, model = path
    times: list[float] = []
    threads = [threading.Thread(target=lambda: times.append(one_request(url, key, stream=False, model=model).seconds))
               for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statistics.median(times)


def interleaved_latency(paths: dict[str, GatewayPath], clients: int, rounds: int, warm: int = 3,
                        measure=one_round) -> tuple[dict[str, float], float]:
    """Each gateway's median over ``rounds`` of (its time / the engine's time straight) in the same round, and the
    straight path's median time; every path warmed first with ``warm`` uncounted rounds (a fresh gateway's first
    requests open connections, a fresh engine's fill its caches), and each round visits the paths in a rotating order.

    + paths: name -> path, one of them named ``direct``
    + clients: requests at once in each round of each path
    + rounds: measured rounds
    + warm: uncounted rounds per path before the first measured one
    + measure: one round along a path (``one_round``; a test gives a stand-in)
    """
    names = list(paths)
    for _ in range(warm):
        for name in names:
            measure(paths[name], clients)
    ratios: dict[str, list[float]] = {name: [] for name in names if name != "direct"}
    straight: list[float] = []
    for index in range(rounds):
        order = names[index % len(names):] + names[:index % len(names)]
        times = {name: measure(paths[name], clients) for name in order}
        straight.append(times["direct"])
        for name in ratios:
            ratios[name].append(times[name] / times["direct"])
    return {name: statistics.median(values) for name, values in ratios.items()}, statistics.median(straight)


def faults(candidate: Candidate, engines: list[Engine]) -> dict[str, object]:
    """Load the candidate while engine 1 is killed and started again, engine 2 hung and woken, engine 0 restarted."""
    began, stop = time.monotonic(), threading.Event()
    outcomes: list[Outcome] = []
    worker = threading.Thread(target=lambda: outcomes.extend(
        load(candidate.url, candidate.key, clients=6, until=began + 300, streams=True, model=candidate.model,
             stop=stop)))
    worker.start()
    marks: dict[str, float] = {}
    time.sleep(3)
    marks["kill"] = time.monotonic()
    engines[1].signal(signal.SIGKILL)
    time.sleep(3)
    engines[1].start()
    back_after_kill = returning(engines[1])
    marks["stop"] = time.monotonic()
    engines[2].signal(signal.SIGSTOP)
    time.sleep(10)
    engines[2].signal(signal.SIGCONT)
    back_after_stop = returning(engines[2])
    marks["restart"] = time.monotonic()
    engines[0].signal(signal.SIGTERM)
    engines[0].start()
    back_after_restart = returning(engines[0])
    marks["end"] = time.monotonic()
    time.sleep(1)
    stop.set()
    worker.join()

    def lost(start: float, end: float) -> tuple[int, ...]:
        window = [o for o in outcomes if start <= o.started < end]
        plain = sum(1 for o in window if o.kind == "plain" and not o.ok)
        streams = [stream_stage(o) for o in window if o.kind == "stream" and not o.ok]
        return (len(window), plain, *(streams.count(stage) for stage in ("before headers", "after headers",
                                                                          "after a token")))

    return {"kill": lost(marks["kill"] - 1, marks["stop"]), "stop": lost(marks["stop"], marks["restart"]),
            "restart": lost(marks["restart"], marks["end"] + 1), "total": len(outcomes),
            "back": (back_after_kill, back_after_stop, back_after_restart)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--soak-seconds", type=float, default=30.0)
    parser.add_argument("--only", choices=["haproxy", "smg"], default=None)
    parser.add_argument("--rounds", type=int, default=12, help="measured rounds per latency cell")
    parser.add_argument("--warm", type=int, default=3, help="uncounted rounds per path before them")
    args = parser.parse_args()
    model = ensure_gemma(REPO_ROOT / ".cache" / "models")
    work = Path(tempfile.mkdtemp(prefix="gateway-candidates-"))
    work.chmod(0o755)  # HAProxy's worker (user haproxy) reaches its hop sockets in it
    engines = [Engine(free_loopback_port(), model, work / f"engine{index}.log") for index in range(3)]
    for engine in engines:
        engine.start()
    candidates: list[Candidate] = [candidate for candidate in (Haproxy("haproxy", work), Smg("smg", work))
                                   if not args.only or candidate.name == args.only]
    results: dict[str, dict[str, object]] = {candidate.name: {} for candidate in candidates}
    try:
        for engine in engines:
            engine.wait_healthy()
        # Latency: every candidate in front of engine 0 at once, the paths interleaved round by round.
        for candidate in candidates:
            candidate.start(engines[:1])
        paths = {"direct": (engines[0].url, None, MODEL),
                 **{candidate.name: (candidate.url, candidate.key, candidate.model) for candidate in candidates}}
        direct: dict[int, float] = {}
        for clients in (1, 8):
            print(f"latency at C={clients}: {args.warm} warm rounds, then {args.rounds} rounds of "
                  f"{', '.join(paths)} in turn", flush=True)
            ratios, direct[clients] = interleaved_latency(paths, clients, args.rounds, args.warm)
            for name, ratio in ratios.items():
                results[name].setdefault("latency", {})[clients] = ratio  # type: ignore[union-attr]
        for candidate in candidates:
            candidate.stop()
        for candidate in candidates:  # faults one candidate at a time: each owns the three engines meanwhile
            print(f"faults through {candidate.name}", flush=True)
            row = results[candidate.name]
            candidate.start(engines)
            row["faults"] = faults(candidate, engines)
            soak = load(candidate.url, candidate.key, clients=8, until=time.monotonic() + args.soak_seconds,
                        streams=False, model=candidate.model, max_tokens=1)
            row["rss"] = (candidate.rss_mib(), len(soak) + int(row["faults"]["total"]))  # type: ignore[index]
            row["size"] = candidate.installed_mib()
            candidate.stop()
    finally:
        for candidate in candidates:
            if candidate.process and candidate.process.poll() is None:
                candidate.stop()
        for engine in engines:
            if engine.process and engine.process.poll() is None:
                engine.process.send_signal(signal.SIGCONT)
                engine.process.terminate()
                engine.process.wait(timeout=30)
    print_table(results, direct)
    shutil.rmtree(work, ignore_errors=True)
    return 0


def print_table(results: dict[str, dict], direct: dict[int, float]) -> None:
    """The comparison, one column per candidate.

    + results: per candidate its latency ratios, fault counts, memory and size
    + direct: per concurrency, the median time of a request straight to the engine
    """
    names = list(results)
    print(f"\ngateways in front of 3 llama.cpp engines (Gemma 3 270M, 8 tokens out), 2 cores; straight to an "
          f"engine: median {direct[1] * 1000:.0f} ms at C=1, {direct[8] * 1000:.0f} ms at C=8")
    print(f"{'':44}" + "".join(f"{name:>18}" for name in names))

    def line(label: str, values: list[str]) -> None:
        print(f"{label:44}" + "".join(f"{value:>18}" for value in values))

    for clients in (1, 8):
        line(f"latency through / direct, C={clients} (interleaved)",
             [f"{results[n]['latency'][clients]:.3f}" for n in names])
    for fault, label in (("kill", "engine killed"), ("stop", "engine hung (SIGSTOP 10 s)"),
                         ("restart", "engine restarted")):
        line(f"{label}: sent / plain lost / stream lost", [
            "{} / {} / {}+{}+{}".format(*results[n]["faults"][fault]) for n in names])
    for index, label in enumerate(("killed", "hung", "restarted")):
        line(f"{label} engine: s from healthy to traffic", [f"{results[n]['faults']['back'][index]:.1f}"
                                                            for n in names])
    line("RSS after load (MiB) / requests served", [f"{results[n]['rss'][0]:.1f} / {results[n]['rss'][1]}"
                                                    for n in names])
    line("installed (MiB)", [f"{results[n]['size']:.1f}" for n in names])
    if len(names) == 2:
        a, b = names
        print(f"ratios {b}/{a}: RSS {results[b]['rss'][0] / results[a]['rss'][0]:.1f}x, installed "
              f"{results[b]['size'] / results[a]['size']:.1f}x")
    print("stream lost: before its headers + after them, before a token + after a token (only the first kind can "
          "be retried)")


if __name__ == "__main__":
    sys.exit(main())
