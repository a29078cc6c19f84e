"""What the health-metrics timer on the rig reads: its paths, and its config rendered from the profile.

The collector (``rigforge/remote/health_metrics.py``, standard library only) knows nothing of profiles: the
controller hands it, as one JSON file, what the profile expects of the GPUs, the engine's unit and health URL,
the known-failure signatures, the bench's primary metric with its floor and the paths whose disks fill.

    config = collector_config(profile)   # -> /etc/rigforge/monitoring/collector.json
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rigforge.bench_runs.plan import HOST_LATEST_NAME, HOST_RESULTS_DIR
from rigforge.known_failures import match, signature_data
from rigforge.profile import Profile
from rigforge.serving.engines import UNIT_NAME, health_url
from rigforge.updates.comparison import METRICS

#: The collector and its two helpers (the GPU query, the project's known-failure matcher) on the rig.
COLLECTOR_DIR = "/opt/rigforge/lib/monitoring"
COLLECTOR_SCRIPT = f"{COLLECTOR_DIR}/health_metrics.py"
#: The matcher's module name on the rig (a copy of rigforge/known_failures/match.py).
MATCHER_MODULE = "known_failures_match"
REMOTE_SOURCES = Path(__file__).resolve().parents[1] / "remote"
#: remote path -> the repository file it is a copy of.
COLLECTOR_FILES = {
    COLLECTOR_SCRIPT: REMOTE_SOURCES / "health_metrics.py",
    f"{COLLECTOR_DIR}/gpu_health.py": REMOTE_SOURCES / "gpu_health.py",
    f"{COLLECTOR_DIR}/{MATCHER_MODULE}.py": Path(match.__file__),
}
#: What rigforge publishes on every rig for an owner's Prometheus and Grafana (and what the role reads).
PUBLISH_DIR = "/etc/rigforge/monitoring"
COLLECTOR_CONFIG = f"{PUBLISH_DIR}/collector.json"
#: The collector's journal cursor and counts since boot.
STATE_FILE = "/var/lib/rigforge/monitoring/state.json"
TEXTFILE_NAME = "rigforge.prom"
SERVICE = "rigforge-health-metrics.service"
TIMER = "rigforge-health-metrics.timer"
#: The bench client's syslog identifier (rigforge.bench.__main__.SYSLOG_IDENT: the bench package is stdlib only).
BENCH_IDENT = "rigforge-bench"
#: Docker's data root: where a container engine's image and its JIT-cache volume fill a disk.
DOCKER_ROOT = "/var/lib/docker"


def textfile_path(profile: Profile) -> str:
    """Where node_exporter's textfile collector finds rigforge's metrics."""
    return f"{profile.monitoring.node_exporter.textfile_dir}/{TEXTFILE_NAME}"


def primary_bench(profile: Profile) -> dict[str, Any]:
    """The bench's primary metric: where it sits in a cell's metrics, its cell, and the floor it must clear."""
    primary = profile.bench.primary
    metric = next(item for item in METRICS if item.name == primary.metric)
    floor = next((item for item in profile.bench.floors
                  if (item.concurrency, item.input_tokens) == (primary.concurrency, primary.input_tokens)), None)
    minimum = {"decode_tps_per_user": "min_decode_tps_per_user", "output_tps": "min_output_tps"}.get(primary.metric)
    return {"latest": f"{HOST_RESULTS_DIR}/{HOST_LATEST_NAME}", "metric": primary.metric, "key": metric.key,
            "stat": metric.stat, "concurrency": primary.concurrency, "input_tokens": primary.input_tokens,
            "floor": getattr(floor, minimum) if floor is not None and minimum else None}


def watched_disks(profile: Profile) -> dict[str, str]:
    """The paths whose filesystems the collector watches: the weights, and Docker's data root for a container engine."""
    disks = {"weights": profile.model.path}
    if profile.engine.native is None:
        disks["images-and-jit-caches"] = DOCKER_ROOT
    return disks


def collector_config(profile: Profile) -> dict[str, Any]:
    """Everything the collector reads, as plain JSON-able data."""
    gpus = profile.gpus
    return {
        "interval_s": profile.monitoring.interval_s,
        "textfile": textfile_path(profile),
        "state": STATE_FILE,
        "matcher_dir": COLLECTOR_DIR,
        "matcher_module": MATCHER_MODULE,
        "signatures": signature_data(),
        "bench_ident": BENCH_IDENT,
        "engine": {"unit": UNIT_NAME, "health_url": health_url(profile),
                   "health_timeout_s": profile.engine.health_timeout_s},
        "gpus": None if gpus is None else {
            "count": gpus.count, "model": gpus.model, "pcie_gen": gpus.pcie_gen, "pcie_width": gpus.pcie_width,
            "persistence_mode": gpus.persistence_mode, "power_limit_w": gpus.power_limit_w},
        "bench": primary_bench(profile),
        "disks": watched_disks(profile),
    }
