"""The two gateway candidates of measurements/gateway_candidates.py and the engines behind them, as processes.

``Engine`` is one llama.cpp server (xllamacpp, tests/bench_support/serve_model.py) on a loopback port, restartable
and signalled by the measurement; ``Haproxy`` and ``Smg`` start a gateway in front of a list of engines with the
same health-check period, timeout and retries (``SETTINGS``): HAProxy from the configuration deploys/gateway.py
writes (rigforge/gateway/haproxy.py), SGLang's model gateway (PyPI ``smg``) installed into
.cache/gateway-candidates/smg on first use. Several candidates can run at once, each on its own port.

Example::

    engine = Engine(free_loopback_port(), model, work / "engine0.log")
    engine.start(); engine.wait_healthy()
    gateway = Haproxy("haproxy", work)
    gateway.start([engine])
    one_request(gateway.url, gateway.key, stream=False, model=gateway.model)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from rigforge.gateway.haproxy import GatewayRig, group_routes, render_haproxy_config
from rigforge.profile.loader import load_profile
from tests.bench_support.gateway_load import one_request
from tests.bench_support.llama_server import free_loopback_port, is_healthy

REPO_ROOT = Path(__file__).resolve().parents[2]
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
        """Send the engine a signal; a SIGKILL or SIGTERM is waited for until the process is gone.

        + number: the signal (``signal.SIGSTOP`` hangs it, ``signal.SIGCONT`` wakes it)
        """
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


@dataclass
class Candidate:
    """One gateway process in front of some engines, on a port of its own; its clients' key and model name."""

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
        """The gateway's command line (its configuration written first where it has one).

        + engines: the engines behind it
        """
        raise NotImplementedError

    def start(self, engines: list[Engine]) -> None:
        """Start the gateway in front of ``engines`` and wait until a request through it is answered.

        + engines: the engines behind it
        """
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
