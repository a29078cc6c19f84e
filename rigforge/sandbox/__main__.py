"""Sandbox hosts from the command line: ``python -m rigforge.sandbox {image,up,down,status,reset}``.

The state directory is ``--state-dir``, else ``$RIGFORGE_SANDBOX_STATE`` (as ``inventory/sandbox.py`` reads
it), else ``.sandbox``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rigforge.sandbox.docker import SandboxError, ensure_docker
from rigforge.sandbox.hosts import down, reset, status, up
from rigforge.sandbox.image import build_image
from rigforge.sandbox.state import DEFAULT_STATE_DIR, STATE_ENV, default_state_dir, load_state


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m rigforge.sandbox {image,up,down,status,reset}``."""
    parser = argparse.ArgumentParser(prog="python -m rigforge.sandbox", description=__doc__.split("\n")[0])
    parser.add_argument("--state-dir", type=Path, default=default_state_dir(),
                        help=f"state directory (default: ${STATE_ENV} or {DEFAULT_STATE_DIR})")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("image", help="install/start Docker if needed and build the base image")
    up_parser = sub.add_parser("up", help="start hosts: names, or a count N for rig1..rigN (default 1)")
    up_parser.add_argument("names", nargs="*")
    up_parser.add_argument("--docker-socket", action="store_true", help="mount the machine's docker socket")
    down_parser = sub.add_parser("down", help="remove the named hosts (all sandbox hosts without names)")
    down_parser.add_argument("names", nargs="*")
    reset_parser = sub.add_parser("reset", help="remove and recreate a host fresh")
    reset_parser.add_argument("name")
    sub.add_parser("status", help="show hosts, container and systemd state")
    args = parser.parse_args(argv)
    try:
        if args.command == "image":
            ensure_docker()
            print(build_image())
        elif args.command == "up":
            names: list[str] | int = args.names or 1
            if len(args.names) == 1 and args.names[0].isdigit():
                names = int(args.names[0])
            up(names, args.state_dir, mount_docker_socket=args.docker_socket)
        elif args.command == "down":
            down(args.names or None, args.state_dir)
        elif args.command == "reset":
            reset(args.name, args.state_dir)
        else:
            state = load_state(args.state_dir)
            for name, container, system in status(args.state_dir):
                print(f"{name:<16} 127.0.0.1:{state.host(name).port:<6} {container:<10} {system}")
    except (SandboxError, FileNotFoundError) as error:
        print(f"sandbox: error: {error}")
        return 1
    return 0




if __name__ == "__main__":
    raise SystemExit(main())
