"""Controller side of the interconnect probe: how to start it on a rig, and how to read its report.

The report is the JSON document ``interconnect.py`` prints (committed real example:
tests/fixtures/device-run/). A step that timed out or crashed is a failure; so is an all-reduce
that returned a wrong sum. Bandwidth numbers are reported, not judged: the profile has no floor
for them, and rig-facts §2.1 gives the PIX reference (P2P 48.7 GB/s, 0.37 us).
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from rigforge.profile import Profile

#: What `--data probe_python=...` may name: a command or an absolute path, nothing a shell would expand.
_PYTHON = re.compile(r"^[A-Za-z0-9_./+-]+$")


def probe_argv(profile: Profile, script: str, python: str | None = None) -> list[str]:
    """The command that runs the probe at `script` (a path on the rig) in the engine's environment.

    + profile: the rig's profile; a container engine runs the probe inside its image
    + script: where interconnect.py was uploaded on the rig
    + python: an explicit interpreter on the rig (``--data probe_python=...``), skipping the image
    """
    nccl_env = dict(profile.nccl.env) if profile.nccl else {}
    if python is not None:
        if not _PYTHON.match(python):
            raise ValueError(f"probe_python {python!r}: give a command name or an absolute path")
        return ["env", *(f"{key}={value}" for key, value in nccl_env.items()), python, script]
    if profile.engine.native is not None or profile.engine.docker is None:
        return ["env", *(f"{key}={value}" for key, value in nccl_env.items()), "python3", script]
    # Inside the engine's own container, with its environment file (NCCL settings, graph XML) and mounts.
    from rigforge.serving.engines import container_lines

    folder = script.rsplit("/", 1)[0]
    lines = container_lines(profile, name="rigforge-probe", extra_volumes={folder: folder})
    return [word for line in lines for word in line] + ["python3", script]


def probe_shell_command(argv: list[str], step_timeout_s: int) -> str:
    """The argv as one shell line, with the per-step timeout for the supervisor."""
    return shlex.join([*argv, "--step-timeout", str(step_timeout_s)])


def probe_failures(report: dict[str, Any] | None) -> list[str]:
    """Why the probe failed, one line per problem; empty when every step succeeded."""
    if report is None:
        return ["the probe printed no report"]
    problems = [f"{step['step']} {' '.join(step.get('args', []))}".strip() + f": {step['status']}: {step.get('error')}"
                for step in report.get("steps", []) if step.get("status") != "ok"]
    for step in report.get("steps", []):
        result = step.get("result") or {}
        if step.get("step") == "allreduce" and result and not result.get("correct", False):
            problems.append("allreduce: wrong sum (data corrupted between GPUs)")
        if step.get("step") == "inventory" and result and result.get("device_count", 0) < 2:
            problems.append(f"inventory: {result.get('device_count', 0)} GPU visible to PyTorch: no pair to probe")
    return problems


def _size(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def probe_lines(report: dict[str, Any]) -> list[str]:
    """The probe's numbers as short lines: one per GPU pair, then the all-reduce latencies."""
    lines: list[str] = []
    steps = {step["step"]: step for step in report.get("steps", [])}
    inventory = (steps.get("inventory") or {}).get("result") or {}
    if inventory:
        names = ", ".join(sorted(set(inventory.get("names", []))))
        lines.append(f"{inventory.get('device_count')} GPUs ({names}); torch {inventory.get('torch')}, "
                     f"CUDA {inventory.get('cuda')}, NCCL {inventory.get('nccl')}")
    for step in report.get("steps", []):
        result = step.get("result") or {}
        if step["step"] == "p2p" and result:
            first, second = result["pair"]
            bandwidth, latency = result["bandwidth_gbs"], result["latency_us"]
            lines.append(
                f"GPU{first}<->GPU{second}: peer access {'yes' if result['peer_access'] else 'NO'}; "
                f"{first}->{second} {bandwidth[f'{first}->{second}']:.1f} GB/s, "
                f"{second}->{first} {bandwidth[f'{second}->{first}']:.1f} GB/s, "
                f"both ways {bandwidth['bidirectional']:.1f} GB/s; latency "
                f"{latency[f'{first}->{second}']:.2f} / {latency[f'{second}->{first}']:.2f} us"
                + ("" if result.get("latency_gpu_timed", True) else " (CPU-bound: launch rate, not copy latency)"))
        elif step["step"] == "allreduce" and result:
            parts = [f"{_size(row['bytes'])} {row['latency_us']:.1f} us"
                     + (f" (graph {row['graph_latency_us']:.1f})" if "graph_latency_us" in row else "")
                     for row in result["sizes"]]
            largest = result["sizes"][-1]
            sums = "sum correct" if result["correct"] else "WRONG SUM"
            lines.append(f"all-reduce over {result['world_size']} GPUs ({sums}): " + ", ".join(parts)
                         + f"; busbw at {_size(largest['bytes'])} {largest['busbw_gbs']:.1f} GB/s")
            if result.get("graph_error"):
                lines.append(f"all-reduce in a CUDA graph not measured: {result['graph_error']}")
    lines += [f"FAILED {problem}" for problem in probe_failures(report)]
    return lines
