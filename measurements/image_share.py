"""The second rig's engine image with and without the fleet share: loaded from the rig that built it, or built
on it (no asserting; prints what it measured).

Starts two sandbox hosts (its own state directory and host names), each with its own Docker engine, and the
stand-in git repository on the first (tests/e2e/image_builds.py: git daemon, the branch main moves). The
``chain-check`` image is built from main; its base carries a layer of ``--size-mb`` random bytes so that what
travels has some weight (an engine image is 20-40 GB; this one is the base plus a few MB). Per repeat, after a
new commit on main:

- shared: ``deploys/images.py --data rebuild=true`` on both rigs: the first rig to get there builds, the other
  loads the image through this machine (``docker save | docker load`` over the two SSH connections); the second
  rig's time is its transfer (``got it from ...: N MB in S s``);
- not shared: the image removed from that rig again, and the same deploy on it alone (``--limit``): it builds
  the image itself from the same recorded commit (``image build: done in S s``).

Then the transfer rate, and what a 30 GB engine image would take at that rate beside the 30-90 minutes of its
build on a rig (rig-facts §7). The build here is seconds (a base image already on the rig, no compiler), so the
share cannot win here: it is the rate that carries over.

    .venv/bin/python measurements/image_share.py [--size-mb 512] [--repeats 2] [--keep]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests" / "e2e"))

from image_builds import (  # noqa: E402
    import_minimal_image,
    moving_ref_overrides,
    push_commit,
    serve_stand_in_repository,
)

from rigforge.sandbox import down, exec_in, load_state, up  # noqa: E402
from tests.e2e.conftest import inventory_source  # noqa: E402

BASE_IMAGE = "rigforge-test/sharebase:1"
CONTAINER_DEPLOY = "from roles import base, container\n\nbase.apply_base()\ncontainer.apply_container()\n"
BUILT = re.compile(r"\[(?P<host>[\w-]+)\] image build: done in (?P<seconds>\d+)s")
LOADED = re.compile(r"\[(?P<host>[\w-]+)\] image (?P<tag>\S+): got it from (?P<source>\S+): (?P<mb>[\d.]+) MB in "
                    r"(?P<seconds>[\d.]+) s")
ENGINE_IMAGE_GB = 30
ENGINE_BUILD_MINUTES = "30-90"


def pyinfra(inventory: Path, deploy: str, *args: str) -> tuple[float, str]:
    """Run ``pyinfra -y`` from the repository root; wall seconds and output. A failed run stops the measurement."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(inventory), deploy, *args], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise SystemExit(f"pyinfra {deploy} {' '.join(args)} failed (exit {proc.returncode}):\n{output[-4000:]}")
    return seconds, output


def weighted_base(name: str, state_dir: Path, size_mb: int) -> None:
    """The minimal base image plus a layer of ``size_mb`` random bytes, made in the host's own engine."""
    host = load_state(state_dir).host(name)
    import_minimal_image(host, "rigforge-test/minimal:1", extra_tools=("git",))
    script = (f"mkdir -p /tmp/sharebase && head -c {size_mb}M /dev/urandom > /tmp/sharebase/blob && "
              "printf 'FROM rigforge-test/minimal:1\\nCOPY blob /opt/blob\\n' > /tmp/sharebase/Dockerfile && "
              f"docker build -q -t {BASE_IMAGE} /tmp/sharebase >/dev/null && rm -rf /tmp/sharebase")
    proc = exec_in(host, script, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: the weighted base image: {proc.stderr}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=512, help="random bytes in the base image's layer")
    parser.add_argument("--repeats", type=int, default=2, help="measured repeats of both variants")
    parser.add_argument("--keep", action="store_true", help="leave the hosts running afterwards")
    args = parser.parse_args()
    state_dir = REPO_ROOT / ".sandbox-image-share"
    names = [f"share{i}-{os.getpid() % 10000}" for i in (1, 2)]
    print(f"starting 2 sandbox hosts in {state_dir}", flush=True)
    state = up(names, state_dir)
    try:
        first = state.host(names[0])
        address = exec_in(first, "ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1").stdout.strip()
        overrides = moving_ref_overrides(f"git://{address}/standin.git", BASE_IMAGE)
        inventory = state_dir / "share.py"
        inventory.write_text(inventory_source(state_dir, names, "sandbox", overrides))
        container_deploy = state_dir / "container_deploy.py"
        container_deploy.write_text(CONTAINER_DEPLOY)
        pyinfra(inventory, str(container_deploy))
        serve_stand_in_repository(first)
        for name in names:
            weighted_base(name, state_dir, args.size_mb)
        push_commit(first, "zero")
        pyinfra(inventory, "deploys/images.py")  # the first image and the records, untimed
        shared: list[float] = []
        built: list[float] = []
        rates: list[float] = []
        sizes: list[float] = []
        for repeat in range(1, args.repeats + 1):
            push_commit(first, f"repeat{repeat}")
            wall, output = pyinfra(inventory, "deploys/images.py", "--data", "rebuild=true")
            builds, loads = list(BUILT.finditer(output)), list(LOADED.finditer(output))
            if len(builds) != 1 or len(loads) != 1:
                raise SystemExit(f"expected one build and one load, found {len(builds)} and {len(loads)}:\n"
                                 f"{output[-4000:]}")
            loaded = loads[0]
            receiver = load_state(state_dir).host(loaded["host"])
            shared.append(float(loaded["seconds"]))
            sizes.append(float(loaded["mb"]))
            rates.append(float(loaded["mb"]) / max(float(loaded["seconds"]), 1e-3))
            exec_in(receiver, f"docker image rm {loaded['tag']} >/dev/null")
            alone, output = pyinfra(inventory, "deploys/images.py", "--limit", loaded["host"])
            own = [match for match in BUILT.finditer(output) if match["host"] == loaded["host"]]
            if len(own) != 1:
                raise SystemExit(f"{loaded['host']} did not build the image alone:\n{output[-4000:]}")
            built.append(float(own[0]["seconds"]))
            print(f"repeat {repeat}/{args.repeats}: {loaded['host']} loaded {loaded['mb']} MB from "
                  f"{loaded['source']} in {loaded['seconds']} s (fleet run {wall:.1f} s); built it alone in "
                  f"{own[0]['seconds']} s (run {alone:.1f} s)", flush=True)
        rate = statistics.median(rates)
        print()
        print(f"the second rig's image, {args.repeats} repeats, {os.cpu_count()} cores, chain-check on a "
              f"{args.size_mb} MB base ({statistics.median(sizes):.0f} MB saved)")
        print(f"  with the fleet share (loaded through this machine): {statistics.median(shared):6.1f} s "
              f"({rate:.1f} MB/s)")
        print(f"  without it (built on the rig itself):               {statistics.median(built):6.1f} s")
        print(f"  a {ENGINE_IMAGE_GB} GB engine image at {rate:.1f} MB/s: "
              f"{ENGINE_IMAGE_GB * 1000 / rate / 60:.0f} min, beside {ENGINE_BUILD_MINUTES} min of build on "
              "each rig (rig-facts §7)")
    finally:
        if not args.keep:
            down(names, state_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
