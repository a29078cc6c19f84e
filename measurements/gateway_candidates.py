"""Two gateways side by side in front of the same three real engines, in one run (no asserting).

Starts three llama.cpp servers (xllamacpp, Gemma 3 270M, one thread each) on 127.0.0.1 and, one candidate at a
time, HAProxy (Debian's package, the configuration deploys/gateway.py writes: rigforge/gateway/haproxy.py) and
SGLang's model gateway (PyPI ``smg``, installed into .cache/gateway-candidates/smg on first use) with the same
health-check period, timeout and retries. Prints per candidate, as ratios to the engine reached directly where a
ratio means something:

- added latency: median request time at C=1 and C=8 through the gateway with one engine behind it / direct;
- requests lost under load (C=6, half streamed) while one engine is killed (SIGKILL), one hung (SIGSTOP), one
  restarted (SIGTERM, started again): non-streamed failed, streams failed before their first token (a gateway
  could have retried them) and after it (nobody can);
- how long a returning engine waits, after its /health answers 200, for its first request through the gateway;
- the gateway's memory (RSS) after the load and a soak of cheap requests (``--soak-seconds``: the issue's hour,
  shortened to what one run on a 2-core machine can spend; the requests served are printed beside it);
- installed size (the package and the libraries it brings that Debian 12's base lacks; the wheel and its deps).

    flock /work/coord/e2e.lock .venv/bin/python measurements/gateway_candidates.py [--soak-seconds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rigforge.gateway.haproxy import GatewayRig, group_routes, render_haproxy_config  # noqa: E402
from rigforge.profile.loader import load_profile  # noqa: E402
from rigforge.sandbox.model import ensure_gemma  # noqa: E402
from tests.bench_support.gateway_load import Outcome, load, one_request  # noqa: E402
from tests.bench_support.llama_server import free_loopback_port, is_healthy  # noqa: E402

MODEL = "gemma-3-270m"
SMG = "smg==1.13.0"
SETTINGS = {"health": {"interval_s": 1, "timeout_s": 1, "fall": 2, "rise": 2}, "response_timeout_s": 8,
            "retries": 3}


@dataclass
class Engine:
    """One llama.cpp server the run started, restartable on its port."""

    port: int
    model: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        command = [sys.executable, "-m", "tests.bench_support.serve_model", "--model", str(self.model),
                   "--port", str(self.port), "--parallel", "4", "--ctx", "4096", "--threads", "1"]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)

    def wait_healthy(self) -> float:
        while not is_healthy(self.url):
            time.sleep(0.05)
        return time.monotonic()

    def signal(self, number: int) -> None:
        assert self.process is not None
        self.process.send_signal(number)
        if number in (signal.SIGKILL, signal.SIGTERM):
            self.process.wait(timeout=30)

    def served(self) -> float:
        """llama.cpp's prompt-token counter: it grows with each request the engine takes."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=2) as response:
            for line in response.read().decode().splitlines():
                if line.startswith("llamacpp:prompt_tokens_total"):
                    return float(line.split()[-1])
        return 0.0


def paired_latency(direct_url: str, gateway_url: str, key: str | None, model: str, clients: int,
                   rounds: int) -> float:
    """Median over ``rounds`` of (gateway / direct) request time, each round ``clients`` requests at once to the
    engine straight, then as many through the gateway (the order alternating), so both see the same machine."""

    def one_round(url: str, with_key: str | None, asked: str) -> float:
        times: list[float] = []
        threads = [threading.Thread(target=lambda: times.append(
            one_request(url, with_key, stream=False, model=asked).seconds)) for _ in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return statistics.median(times)

    ratios = []
    for index in range(rounds):
        if index % 2:
            through = one_round(gateway_url, key, model)
            direct = one_round(direct_url, None, MODEL)
        else:
            direct = one_round(direct_url, None, MODEL)
            through = one_round(gateway_url, key, model)
        ratios.append(through / direct)
    return statistics.median(ratios)


@dataclass
class Candidate:
    name: str
    work: Path
    key: str | None = None
    model: str = MODEL  # the name clients ask for
    process: subprocess.Popen[bytes] | None = None
    port: int = field(default_factory=free_loopback_port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self, engines: list[Engine]) -> list[str]:
        raise NotImplementedError

    def start(self, engines: list[Engine]) -> None:
        self.port = free_loopback_port()
        with (self.work / f"{self.name}.log").open("ab") as log:
            self.process = subprocess.Popen(self.command(engines), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while one_request(self.url, self.key, stream=False, max_tokens=1, model=self.model).ok is False:
            if time.monotonic() > deadline or self.process.poll() is not None:
                log = (self.work / f"{self.name}.log").read_text()
                raise RuntimeError(f"{self.name} did not answer: {log[-2000:]}")
            time.sleep(0.3)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)

    def rss_mib(self) -> float:
        """Resident memory of the gateway's processes (the master and its worker for HAProxy)."""
        assert self.process is not None
        pids = [str(self.process.pid)] + subprocess.run(["pgrep", "-P", str(self.process.pid)], text=True,
                                                        capture_output=True).stdout.split()
        total = 0
        for pid in pids:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        return total / 1024


class Haproxy(Candidate):
    def command(self, engines: list[Engine]) -> list[str]:
        profile = load_profile("sandbox", {"gateway": {**SETTINGS, "listen_host": "127.0.0.1", "port": self.port,
                                                       "metrics_port": free_loopback_port()}})
        rigs = [GatewayRig(f"rig{index}", "127.0.0.1", engine.port, MODEL, keyed=False, run_dir=str(self.work))
                for index, engine in enumerate(engines)]
        keys = self.work / "users"
        keys.mkdir(exist_ok=True)
        self.key = os.urandom(16).hex()
        (keys / "owner").write_text(self.key + "\n")
        config = render_haproxy_config(profile, group_routes(rigs), admin_socket=str(self.work / "admin.sock"),
                                       state_file=str(self.work / "state"), user_key_dir=str(keys))
        (self.work / "haproxy.cfg").write_text(config)
        return ["haproxy", "-W", "-db", "-f", str(self.work / "haproxy.cfg")]

    def installed_mib(self) -> float:
        sizes = subprocess.run(["dpkg-query", "-W", "-f", "${Installed-Size}\n", "haproxy", "liblua5.3-0"],
                               text=True, capture_output=True).stdout.split()
        return sum(int(size) for size in sizes) / 1024


class Smg(Candidate):
    @property
    def venv(self) -> Path:
        return REPO_ROOT / ".cache" / "gateway-candidates" / "smg"

    def install(self) -> None:
        if not (self.venv / "bin" / "smg").exists():
            subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True)
            subprocess.run([str(self.venv / "bin" / "pip"), "install", "-q", SMG], check=True)

    def command(self, engines: list[Engine]) -> list[str]:
        self.install()
        # smg routes by the model id each engine reports (its /v1/models: the GGUF's path here); no alias needed
        # on HAProxy, which routes by the name the profile gives.
        with urllib.request.urlopen(engines[0].url + "/v1/models", timeout=5) as response:
            self.model = json.loads(response.read())["data"][0]["id"]
        health = SETTINGS["health"]
        return [str(self.venv / "bin" / "smg"), "launch", "--host", "127.0.0.1", "--port", str(self.port),
                "--worker-urls", *[engine.url for engine in engines], "--policy", "round_robin",
                "--disable-tokenizer-autoload", "--prometheus-host", "127.0.0.1",
                "--prometheus-port", str(free_loopback_port()),
                "--health-check-interval-secs", str(health["interval_s"]),
                "--health-check-timeout-secs", str(health["timeout_s"]),
                "--health-failure-threshold", str(health["fall"]), "--health-success-threshold", str(health["rise"]),
                "--request-timeout-secs", str(SETTINGS["response_timeout_s"]),
                "--retry-max-retries", str(SETTINGS["retries"] + 1)]

    def installed_mib(self) -> float:
        site = next((self.venv / "lib").glob("python3*/site-packages"))
        skip = ("pip", "setuptools", "_distutils_hack", "distutils-precedence.pth")
        total = sum(path.stat().st_size for path in site.rglob("*")
                    if path.is_file() and not path.relative_to(site).parts[0].startswith(skip))
        return total / 2**20


def returning(engine: Engine) -> float:
    """Seconds from the engine's /health answering 200 to its first request through the gateway."""
    healthy = engine.wait_healthy()
    before = engine.served()
    while engine.served() <= before:
        if time.monotonic() - healthy > 30:
            return float("inf")
        time.sleep(0.1)
    return time.monotonic() - healthy


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

    def lost(start: float, end: float) -> tuple[int, int, int, int]:
        window = [o for o in outcomes if start <= o.started < end]
        plain = sum(1 for o in window if o.kind == "plain" and not o.ok)
        early = sum(1 for o in window if o.kind == "stream" and not o.ok and not o.first_token)
        late = sum(1 for o in window if o.kind == "stream" and not o.ok and o.first_token)
        return len(window), plain, early, late

    return {"kill": lost(marks["kill"] - 1, marks["stop"]), "stop": lost(marks["stop"], marks["restart"]),
            "restart": lost(marks["restart"], marks["end"] + 1), "total": len(outcomes),
            "back": (back_after_kill, back_after_stop, back_after_restart)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--soak-seconds", type=float, default=30.0)
    parser.add_argument("--only", choices=["haproxy", "smg"], default=None)
    parser.add_argument("--rounds", type=int, default=12, help="paired rounds per latency cell")
    args = parser.parse_args()
    model = ensure_gemma(REPO_ROOT / ".cache" / "models")
    work = Path(tempfile.mkdtemp(prefix="gateway-candidates-"))
    work.chmod(0o755)  # HAProxy's worker (user haproxy) reaches its hop sockets in it
    engines = [Engine(free_loopback_port(), model, work / f"engine{index}.log") for index in range(3)]
    for engine in engines:
        engine.start()
    results: dict[str, dict[str, object]] = {}
    try:
        for engine in engines:
            engine.wait_healthy()
        for engine in engines:  # warm: the first requests of a fresh engine are slower than the rest
            for _ in range(3):
                one_request(engine.url, None, stream=False, model=MODEL)
        direct = {clients: statistics.median(one_request(engines[0].url, None, stream=False, model=MODEL).seconds
                                             for _ in range(5)) for clients in (1,)}
        candidates = [Haproxy("haproxy", work), Smg("smg", work)]
        for candidate in candidates:
            if args.only and candidate.name != args.only:
                continue
            print(f"measuring {candidate.name}", flush=True)
            row: dict[str, object] = {}
            candidate.start(engines[:1])
            row["latency"] = {c: paired_latency(engines[0].url, candidate.url, candidate.key, candidate.model, c,
                                                rounds=args.rounds) for c in (1, 8)}
            candidate.stop()
            candidate.start(engines)
            row["faults"] = faults(candidate, engines)
            soak = load(candidate.url, candidate.key, clients=8, until=time.monotonic() + args.soak_seconds,
                        streams=False, model=candidate.model, max_tokens=1)
            row["rss"] = (candidate.rss_mib(), len(soak) + int(row["faults"]["total"]))  # type: ignore[index]
            row["size"] = candidate.installed_mib()
            candidate.stop()
            results[candidate.name] = row
    finally:
        for engine in engines:
            if engine.process and engine.process.poll() is None:
                engine.process.send_signal(signal.SIGCONT)
                engine.process.terminate()
                engine.process.wait(timeout=30)
    print_table(results, direct)
    shutil.rmtree(work, ignore_errors=True)
    return 0


def print_table(results: dict[str, dict], direct: dict[int, float]) -> None:
    names = list(results)
    print(f"\ngateways in front of 3 llama.cpp engines (Gemma 3 270M, 8 tokens out), 2 cores; one request straight "
          f"to an engine: median {direct[1] * 1000:.0f} ms")
    print(f"{'':44}" + "".join(f"{name:>18}" for name in names))

    def line(label: str, values: list[str]) -> None:
        print(f"{label:44}" + "".join(f"{value:>18}" for value in values))

    line("latency through / direct, C=1 (paired)", [f"{results[n]['latency'][1]:.3f}" for n in names])
    line("latency through / direct, C=8 (paired)", [f"{results[n]['latency'][8]:.3f}" for n in names])
    for fault, label in (("kill", "engine killed"), ("stop", "engine hung (SIGSTOP 10 s)"),
                         ("restart", "engine restarted")):
        line(f"{label}: sent / plain lost / stream lost", [
            "{} / {} / {}+{}".format(*results[n]["faults"][fault]) for n in names])
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
    print("stream lost: before its first token + after it (only the first kind can be retried)")


if __name__ == "__main__":
    sys.exit(main())
