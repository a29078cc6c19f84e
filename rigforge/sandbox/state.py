"""State of the sandbox hosts: which hosts exist, on which ports, and the SSH files that reach them.

``state_dir/state.json`` (written by ``rigforge.sandbox.up``) is the single record the inventory, the
e2e fixtures and the CLI read. Parsing and writing it are pure functions.

Example::

    state = load_state(Path(".sandbox"))
    data = state.host_data(state.host("rig1"))  # ssh_hostname, ssh_port, ssh_key, ...
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rigforge.sandbox.docker import SandboxError

DEFAULT_STATE_DIR = Path(".sandbox")
#: The environment variable naming the state directory, read by the CLI and ``inventory/sandbox.py``.
STATE_ENV = "RIGFORGE_SANDBOX_STATE"


def default_state_dir() -> Path:
    """``$RIGFORGE_SANDBOX_STATE`` when set, else ``.sandbox``."""
    return Path(os.environ.get(STATE_ENV) or DEFAULT_STATE_DIR)


@dataclass(frozen=True)
class SandboxHost:
    """One sandbox host: its name (also its hostname), container name and SSH port on 127.0.0.1."""

    name: str
    container: str
    port: int


@dataclass
class SandboxState:
    """What ``up`` made: the hosts, the SSH key and known_hosts that reach them, the image they run."""

    hosts: list[SandboxHost] = field(default_factory=list)
    key_path: Path = DEFAULT_STATE_DIR / "id_ed25519"
    known_hosts_path: Path = DEFAULT_STATE_DIR / "known_hosts"
    image: str = ""

    def host(self, name: str) -> SandboxHost:
        """Return the host called ``name``; raise SandboxError if there is none."""
        for host in self.hosts:
            if host.name == name:
                return host
        raise SandboxError(f"no sandbox host {name!r} (have: {', '.join(h.name for h in self.hosts)})")

    def host_data(self, host: SandboxHost) -> dict[str, object]:
        """Return the pyinfra host data that connects to ``host`` with strict host-key checking."""
        return {
            "ssh_hostname": "127.0.0.1",
            "ssh_port": host.port,
            "ssh_user": "root",
            "ssh_key": str(Path(self.key_path).resolve()),
            "ssh_known_hosts_file": str(Path(self.known_hosts_path).resolve()),
            "ssh_strict_host_key_checking": "yes",
        }


def state_to_json(state: SandboxState) -> str:
    """Serialise the state for ``state.json``."""
    return json.dumps({"image": state.image, "key_path": str(state.key_path),
                       "known_hosts_path": str(state.known_hosts_path),
                       "hosts": [asdict(host) for host in state.hosts]}, indent=2) + "\n"


def state_from_json(text: str) -> SandboxState:
    """Parse ``state.json`` text back into a SandboxState."""
    raw = json.loads(text)
    return SandboxState(hosts=[SandboxHost(h["name"], h["container"], int(h["port"])) for h in raw["hosts"]],
                        key_path=Path(raw["key_path"]), known_hosts_path=Path(raw["known_hosts_path"]),
                        image=raw["image"])


def load_state(state_dir: Path = DEFAULT_STATE_DIR) -> SandboxState:
    """Read ``state_dir/state.json``; raise FileNotFoundError (saying what to run) if ``up`` never ran there."""
    path = Path(state_dir) / "state.json"
    if not path.exists():
        raise FileNotFoundError(f"no sandbox state in {path}: run `python -m rigforge.sandbox up` first")
    return state_from_json(path.read_text())


def load_or_empty_state(state_dir: Path) -> SandboxState:
    """Read ``state_dir/state.json``, or return an empty state (no hosts) when there is none yet."""
    path = state_dir / "state.json"
    return state_from_json(path.read_text()) if path.exists() else empty_state(state_dir)


def save_state(state_dir: Path, state: SandboxState) -> None:
    """Write ``state_dir/state.json`` and ``state_dir/ssh_config`` atomically (readers never see half a file)."""
    for name, text in (("state.json", state_to_json(state)), ("ssh_config", ssh_config_text(state))):
        tmp = state_dir / f"{name}.tmp"
        tmp.write_text(text)
        tmp.replace(state_dir / name)


def ssh_config_text(state: SandboxState) -> str:
    """An OpenSSH config naming every host, for ``ssh -F`` and testinfra's ``--ssh-config``."""
    blocks = []
    for host in state.hosts:
        blocks.append(
            f"Host {host.name}\n  HostName 127.0.0.1\n  Port {host.port}\n  User root\n"
            f"  IdentityFile {Path(state.key_path).resolve()}\n"
            f"  UserKnownHostsFile {Path(state.known_hosts_path).resolve()}\n"
            "  StrictHostKeyChecking yes\n  IdentitiesOnly yes\n"
        )
    return "# Written by python -m rigforge.sandbox: the sandbox hosts, host keys pinned.\n" + "\n".join(blocks)


def empty_state(state_dir: Path) -> SandboxState:
    """Return the state of a ``state_dir`` with no hosts yet."""
    return SandboxState(key_path=state_dir / "id_ed25519", known_hosts_path=state_dir / "known_hosts")


def host_names(names: list[str] | int) -> list[str]:
    """Return host names: the list as given, or ``rig1..rigN`` for a count N."""
    return [f"rig{i}" for i in range(1, names + 1)] if isinstance(names, int) else list(names)
