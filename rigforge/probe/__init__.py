"""The GPU interconnect probe: P2P bandwidth/latency per GPU pair and small-message all-reduce latency.

``interconnect.py`` is the script that runs on the rig (standard library + the engine's PyTorch);
``report`` reads its JSON on the controller, says what failed and formats the numbers.
``deploys/preflight.py --data probe=true`` uploads and runs it (roles/preflight.py).

May import: serving, profile.
"""

from pathlib import Path

from rigforge.probe.report import probe_argv, probe_failures, probe_lines

PROBE_SCRIPT = Path(__file__).resolve().with_name("interconnect.py")

__all__ = ["PROBE_SCRIPT", "probe_argv", "probe_failures", "probe_lines"]
