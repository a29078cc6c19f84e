"""Harness of the e2e tests: real Debian 12 systemd hosts in Docker, reached over SSH on 127.0.0.1.

Every test in this directory is marked ``e2e``. The session fixture ``sandbox`` makes sure Docker
works (installing and starting it on a bare machine), builds the base image once per machine, and
hands out fresh hosts::

    def test_something(sandbox, tmp_path):
        host = sandbox.fresh_host("rig")
        inventory = sandbox.write_inventory(tmp_path / "inventory.py", [host], "sandbox")
        run_pyinfra(inventory, "deploys/full.py")
        assert_no_changes(inventory, "deploys/full.py")

The directory is skipped (with the reason) only when Docker cannot be made to work here; under
CI (``CI=true``) that is a failure instead, so a broken machine never passes silently.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import pytest

from rigforge.sandbox import (
    SandboxError,
    SandboxHost,
    SandboxState,
    build_image,
    down,
    ensure_docker,
    load_state,
    up,
)
from rigforge.sandbox.docker import container_name, docker
from tests.conftest import judges_engine_speed

E2E_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/e2e with ``e2e`` (``-m 'not e2e'`` runs without Docker)."""
    for item in items:
        if E2E_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


class Sandbox:
    """Fresh sandbox hosts for one test session, all removed when the session ends.

    Host names get the session's suffix (``rig`` -> ``rig-3fa2``): test sessions running at once on
    one machine never share or remove each other's containers.
    """

    def __init__(self, state_dir: Path, image: str) -> None:
        self.state_dir = state_dir
        self.image = image
        self.suffix = secrets.token_hex(2)
        self._made: list[str] = []
        #: Docker's CPU weight of the hosts made now (None: Docker's default, 1024); set per module.
        self.cpu_shares: int | None = None

    @property
    def state(self) -> SandboxState:
        """The current state: hosts, key path, known_hosts path."""
        return load_state(self.state_dir)

    def fresh_host(self, name: str, mount_docker_socket: bool = False) -> SandboxHost:
        """Return a new clean host (booted, SSH ready, host key recorded); removed at session end.

        + name: short name; the host's name and hostname is ``<name>-<session suffix>``
        + mount_docker_socket: bind-mount the machine's docker socket (image-build tests)
        """
        full_name = f"{name}-{self.suffix}"
        down([full_name], self.state_dir)  # asking twice for one name gives a clean host again
        state = up([full_name], self.state_dir, mount_docker_socket=mount_docker_socket)
        if self.cpu_shares is not None:  # a weight, not a cap: it only counts while the CPU is contended
            docker("update", "--cpu-shares", str(self.cpu_shares), container_name(full_name))
        if full_name not in self._made:
            self._made.append(full_name)
        return state.host(full_name)

    def write_inventory(self, path: Path, hosts: list[SandboxHost], profile: str = "sandbox",
                        overrides: dict | None = None) -> Path:
        """Write a pyinfra inventory .py for ``hosts`` with ``profile`` (and ``overrides``, over E2E_OVERRIDES);
        return its path."""
        merged = merged_overrides(E2E_OVERRIDES, overrides or {})
        path.write_text(inventory_source(self.state_dir, [h.name for h in hosts], profile, merged))
        return path

    def close(self, keep: int = 0) -> None:
        """Remove the hosts this session made, all but the first ``keep`` of them."""
        gone, self._made = self._made[keep:], self._made[:keep]
        if gone:
            down(gone, self.state_dir)


#: What every e2e host gets unless its test says otherwise: no quality pass in its benches. The pass asks llama.cpp
#: for log-probabilities at every token (a sort of Gemma's 262,144-token vocabulary each), seconds a bench on a
#: 2-core machine, and its first bench would record a reference and restart the engine; the recipes e2e
#: (test_recipes_on_hosts.py) turns it on and checks it.
E2E_OVERRIDES: dict = {"bench": {"quality": {"enabled": False}}}


def merged_overrides(base: dict, top: dict) -> dict:
    """``top`` laid over ``base``, mapping by mapping (``top`` wins).

    >>> merged_overrides({"bench": {"quality": {"enabled": False}}}, {"bench": {"repeats": 1}})
    {'bench': {'quality': {'enabled': False}, 'repeats': 1}}
    """
    merged = dict(base)
    for key, value in top.items():
        both = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = merged_overrides(merged[key], value) if both else value
    return merged


def inventory_source(state_dir: Path, names: list[str], profile: str, overrides: dict) -> str:
    """Return the text of an inventory file for the sandbox hosts ``names`` with ``profile`` and ``overrides``."""
    return ("# Sandbox hosts for one e2e test.\n"
            "from rigforge.inventory import sandbox_hosts\n\n"
            f"hosts = sandbox_hosts({str(state_dir)!r}, {profile!r}, {overrides!r}, names={names!r})\n")


@pytest.fixture(scope="session", autouse=True)
def docker_engine(request: pytest.FixtureRequest) -> None:
    """Make Docker answer (install/start it when needed); skip the e2e tests if it cannot, fail in CI."""
    try:
        with _live_output(request):
            ensure_docker()
    except (SandboxError, OSError) as error:
        reason = f"Docker cannot be made to work on this machine: {error}"
        if _in_ci():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


@pytest.fixture(scope="session")
def sandbox(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            docker_engine: None) -> Iterator[Sandbox]:
    """The session's sandbox: base image built (once per machine), fresh hosts on demand."""
    with _live_output(request):
        image = build_image()
    session = Sandbox(tmp_path_factory.mktemp("sandbox"), image)
    yield session
    session.close()


#: Docker's CPU weight of the hosts of every module but the engine-speed ones (tests/conftest.py), an eighth of
#: Docker's default 1024: where the two pytest-xdist workers contend for the CPU, an engine whose speed is judged
#: gets four fifths of it beside two busy hosts of the other worker. A weight, not a cap: alone, a host gets every CPU.
SHARED_CPU_SHARES = 128


@pytest.fixture(scope="module", autouse=True)
def hosts_per_module(sandbox: Sandbox, request: pytest.FixtureRequest) -> Iterator[None]:
    """Remove each module's hosts when the module ends: a dozen idle systemd hosts at once slow the machine. The
    module's hosts get SHARED_CPU_SHARES unless it judges engine speed."""
    made_before = len(sandbox._made)
    sandbox.cpu_shares = None if judges_engine_speed(request) else SHARED_CPU_SHARES
    yield
    sandbox.close(keep=made_before)


def _live_output(request: pytest.FixtureRequest) -> AbstractContextManager[None]:
    """Let progress lines (Docker install, the 1-3 minute image build) reach the terminal as they come."""
    capture = request.config.pluginmanager.getplugin("capturemanager")
    return capture.global_and_fixture_disabled() if capture is not None else nullcontext()
