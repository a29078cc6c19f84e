"""GPU interconnect probe, run on the rig with the engine environment's Python (PyTorch + NCCL).

Measures, between every pair of GPUs, copy bandwidth (each direction and both at once) and copy
latency, then all-reduce latency across all GPUs for small messages (8 KiB - 1 MiB) plus one large
one for bus bandwidth. Every step runs in its own process group under a hard timeout: a P2P hang
(the missing uvm_disable_hmm / ACS symptom, rig-facts §9 #1) is killed and reported as a failure
instead of wedging the run. NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and friends).

    python3 interconnect.py [--step-timeout 120]      # prints one JSON document on stdout

Standard library only at the top level; torch is imported inside the steps. The exit status is 0
when every step succeeded, 1 otherwise. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

PROBE_VERSION = 1
#: Forced for every step: multicast can put a shared host's GPUs out of service (lent machines).
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
ALLREDUCE_SIZES = (8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 64 << 20)
COPY_BYTES = 256 << 20
COPY_ITERS = 20
LATENCY_COPIES = 200
ALLREDUCE_WARMUP = 20
ALLREDUCE_ITERS = 200
# All-reduces captured in one CUDA graph, and how often the graph is replayed for the timing.
GRAPH_OPS = 20
GRAPH_REPLAYS = 10


def log(message: str) -> None:
    print(f"probe: {message}", file=sys.stderr, flush=True)


# --- supervisor -------------------------------------------------------------------------------

def run_step(argv: list[str], timeout_s: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one step process in its own process group; kill the whole group when it overruns.

    Returns {status: ok|error|timeout, seconds, result (the step's last JSON line), error}.
    """
    started = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, env=env)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # The step and everything it started (NCCL ranks) share the group; a GPU-side hang ignores SIGTERM.
        os.killpg(process.pid, signal.SIGKILL)
        stdout, _ = process.communicate()
        outcome = {"status": "timeout", "seconds": round(time.monotonic() - started, 1),
                   "error": f"no result after {timeout_s:.0f} s: killed (a P2P or NCCL hang?)"}
        partial = last_json_line(stdout)
        return {**outcome, "result": partial} if partial else outcome
    seconds = round(time.monotonic() - started, 1)
    result = last_json_line(stdout)
    if process.returncode != 0 or result is None:
        tail = (stderr.strip().splitlines() or [f"exit status {process.returncode}"])[-1]
        return {"status": "error", "seconds": seconds, "error": tail[-500:]}
    return {"status": "ok", "seconds": seconds, "result": result}


def last_json_line(text: str) -> dict[str, Any] | None:
    """The last line of ``text`` that is a JSON object (the step's or the probe's report), if any."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def supervise(step_timeout_s: float) -> dict[str, Any]:
    """Run the steps in order and collect their results into one report."""
    env = {**os.environ, **SAFE_ENV}
    me = [sys.executable, os.path.abspath(__file__)]
    report: dict[str, Any] = {"probe": "interconnect", "version": PROBE_VERSION, "env": SAFE_ENV, "steps": []}

    def step(name: str, *args: str) -> dict[str, Any]:
        log(f"{name} {' '.join(args)}".strip())
        outcome = {"step": name, "args": list(args), **run_step([*me, "--step", name, *args], step_timeout_s, env)}
        log(f"{name}: {outcome['status']} in {outcome['seconds']} s")
        report["steps"].append(outcome)
        return outcome

    inventory = step("inventory")
    count = inventory.get("result", {}).get("device_count", 0)
    for first in range(count):
        for second in range(first + 1, count):
            step("p2p", str(first), str(second))
    if count >= 2:
        step("allreduce", str(count))
    report["ok"] = bool(report["steps"]) and all(s["status"] == "ok" for s in report["steps"])
    return report


# --- steps (run in their own processes; torch imported here) -----------------------------------

def step_inventory() -> dict[str, Any]:
    import torch

    count = torch.cuda.device_count()
    peers = [[i == j or torch.cuda.can_device_access_peer(i, j) for j in range(count)] for i in range(count)]
    version = torch.cuda.nccl.version() if count else None
    nccl = ".".join(map(str, version)) if isinstance(version, tuple) else version
    return {"device_count": count, "names": [torch.cuda.get_device_name(i) for i in range(count)],
            "peer_access": peers, "torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl}


def _bandwidth_gbs(copies: list[tuple[Any, Any, Any, Any]], devices: list[int]) -> float:
    """GB/s moved by running `copies` (dst, src, src stream, idle dst stream) COPY_ITERS times, together."""
    import torch

    def sync() -> None:
        for device in devices:
            torch.cuda.synchronize(device)

    def issue() -> None:
        for dst, src, stream, idle in copies:
            # torch copies on the source's current stream and fences the destination's current stream;
            # an idle stream there keeps the two directions from waiting on each other.
            with torch.cuda.stream(idle), torch.cuda.stream(stream):
                dst.copy_(src, non_blocking=True)

    issue()
    sync()
    started = time.perf_counter()
    for _ in range(COPY_ITERS):
        issue()
    sync()
    elapsed = time.perf_counter() - started
    return len(copies) * COPY_BYTES * COPY_ITERS / elapsed / 1e9


def _latency_us(dst: Any, src: Any, stream: Any, idle: Any) -> tuple[float, bool]:
    """GPU-timed time of one 4-byte copy, queued behind a spin kernel so launch cost is not counted.

    Returns (microseconds per copy, whether every copy was queued before the spin ended: if not,
    the number is CPU launch rate, not the GPU's copy latency).
    """
    import torch

    spin, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    # Entering `stream` last leaves the source device current, so the spin kernel lands on `stream`.
    with torch.cuda.stream(idle), torch.cuda.stream(stream):
        spin.record(stream)
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(50_000_000)  # ~25 ms at full clock
        start.record(stream)
        queued_at = time.perf_counter()
        for _ in range(LATENCY_COPIES):
            dst.copy_(src, non_blocking=True)
        queued_us = (time.perf_counter() - queued_at) * 1e6
        end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) * 1000 / LATENCY_COPIES, queued_us < spin.elapsed_time(start) * 1000


def step_p2p(first: int, second: int) -> dict[str, Any]:
    import torch

    elements = COPY_BYTES // 4
    big = {d: torch.empty(elements, dtype=torch.float32, device=f"cuda:{d}") for d in (first, second)}
    back = {d: torch.empty(elements, dtype=torch.float32, device=f"cuda:{d}") for d in (first, second)}
    small = {d: torch.zeros(1, dtype=torch.float32, device=f"cuda:{d}") for d in (first, second)}
    streams = {d: (torch.cuda.Stream(device=d), torch.cuda.Stream(device=d)) for d in (first, second)}
    forward = (big[second], big[first], streams[first][0], streams[second][1])
    reverse = (back[first], back[second], streams[second][0], streams[first][1])
    result: dict[str, Any] = {
        "pair": [first, second],
        "peer_access": torch.cuda.can_device_access_peer(first, second),
        "bandwidth_gbs": {
            f"{first}->{second}": _bandwidth_gbs([forward], [first, second]),
            f"{second}->{first}": _bandwidth_gbs([reverse], [first, second]),
            "bidirectional": _bandwidth_gbs([forward, reverse], [first, second]),
        },
    }
    forward_latency = _latency_us(small[second], small[first], streams[first][0], streams[second][1])
    reverse_latency = _latency_us(small[first], small[second], streams[second][0], streams[first][1])
    result["latency_us"] = {f"{first}->{second}": forward_latency[0], f"{second}->{first}": reverse_latency[0]}
    result["latency_gpu_timed"] = forward_latency[1] and reverse_latency[1]
    return result


def _gpu_time_us(issue: Callable[[], None], operations: int) -> float:
    """Mean GPU time per operation of `issue` (which enqueues `operations` of them), from CUDA events."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    issue()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / operations


def _graph_allreduce_us(tensor: Any) -> float:
    """All-reduce latency replayed from a CUDA graph, the way an engine's decode step runs it."""
    import torch
    import torch.distributed as dist

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            dist.all_reduce(tensor)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    # thread_local: NCCL's watchdog thread may query events while this thread captures.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for _ in range(GRAPH_OPS):
            dist.all_reduce(tensor)
    graph.replay()
    torch.cuda.synchronize()
    return _gpu_time_us(lambda: [graph.replay() for _ in range(GRAPH_REPLAYS)], GRAPH_OPS * GRAPH_REPLAYS)


def _allreduce_rank(rank: int, world: int, init_file: str) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=world)
    rows, correct = [], True
    tensors = {size: torch.ones(size // 4, dtype=torch.float32, device=f"cuda:{rank}") for size in ALLREDUCE_SIZES}
    for size, tensor in tensors.items():
        dist.all_reduce(tensor)
        correct &= bool(torch.all(tensor == world).item())
        tensor.zero_()  # repeated sums of ones would overflow; zeros time the same
        for _ in range(ALLREDUCE_WARMUP):
            dist.all_reduce(tensor)
        torch.cuda.synchronize()
        dist.barrier()
        seconds = _gpu_time_us(lambda t=tensor: [dist.all_reduce(t) for _ in range(ALLREDUCE_ITERS)],
                               ALLREDUCE_ITERS) / 1e6
        algbw = size / seconds / 1e9
        rows.append({"bytes": size, "latency_us": seconds * 1e6, "algbw_gbs": algbw,
                     "busbw_gbs": algbw * 2 * (world - 1) / world})
    report: dict[str, Any] = {"world_size": world, "correct": correct, "sizes": rows}
    if rank == 0:
        # Printed before the graph part, so a hang there still leaves these numbers (the last JSON line wins).
        print(json.dumps(report), flush=True)
    try:
        for row in rows:
            dist.barrier()
            row["graph_latency_us"] = _graph_allreduce_us(tensors[row["bytes"]])
    except Exception as error:  # a build without graph-capturable NCCL: keep the eager numbers
        report["graph_error"] = f"{type(error).__name__}: {error}"[:300]
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(report), flush=True)


def step_allreduce(world: int) -> None:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as directory:
        # A file rendezvous: no TCP port, nothing leaves the machine.
        mp.start_processes(_allreduce_rank, args=(world, os.path.join(directory, "rendezvous")), nprocs=world,
                           start_method="spawn")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--step", choices=("inventory", "p2p", "allreduce"))
    parser.add_argument("args", nargs="*", type=int)
    parser.add_argument("--step-timeout", type=float, default=180.0, help="seconds each step may take")
    options = parser.parse_args()
    if options.step == "inventory":
        print(json.dumps(step_inventory()), flush=True)
    elif options.step == "p2p":
        print(json.dumps(step_p2p(*options.args)), flush=True)
    elif options.step == "allreduce":
        step_allreduce(*options.args)
    else:
        report = supervise(options.step_timeout)
        print(json.dumps(report), flush=True)
        failed = [s["step"] for s in report["steps"] if s["status"] != "ok"]
        log(f"{len(report['steps'])} steps, {'all ok' if not failed else 'failed: ' + ', '.join(failed)}")
        return 0 if report["ok"] else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
