"""Settings every test shares, and how ``pytest -n 2`` (scripts/test) spreads the modules over two workers."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Modules that judge engine speed (A/A-tested verdicts over engine starts): one worker runs them one after another,
#: first, and their hosts keep Docker's full CPU weight while the other worker's hosts yield
#: (tests/e2e/conftest.py, ``SHARED_CPU_SHARES``). Two of them at once would each measure the other's load.
ENGINE_SPEED_MODULES = ("test_recipes_on_hosts.py", "test_driver_rollout.py")
#: The niceness of a worker while it runs anything else (its pyinfra runs and unit tests yield to the speed modules).
YIELDING_NICENESS = 10
#: Modules whose hosts drive this machine's own Docker engine (the socket mounted): one worker, one at a time.
MACHINE_DOCKER_MODULES = ("test_container_role.py", "test_docker_ce_takeover.py", "test_sandbox.py")


def worker_group(module: str) -> str:
    """The group of tests one worker runs in a row: the engine-speed or machine-Docker group, else the module.

    >>> worker_group("tests/e2e/test_driver_rollout.py"), worker_group("tests/unit/test_stats.py")
    ('engine-speed', 'tests/unit/test_stats.py')
    """
    name = Path(module).name
    if name in ENGINE_SPEED_MODULES:
        return "engine-speed"
    return "machine-docker" if name in MACHINE_DOCKER_MODULES else module


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group each test for ``--dist loadgroup``; on workers, run the longest group first: the engine-speed modules
    start at once on one worker while the other works through the rest (end-to-end modules before the short unit
    ones, which fill the end). A run without workers keeps the collection's order (unit tests first)."""
    def order(item: pytest.Item) -> int:
        group = worker_group(item.nodeid.split("::")[0])
        return 0 if group == "engine-speed" else 1 if "/e2e/" in item.nodeid else 2

    for item in items:
        item.add_marker(pytest.mark.xdist_group(worker_group(item.nodeid.split("::")[0])))
    if hasattr(config, "workerinput"):  # a pytest-xdist worker
        items.sort(key=order)  # stable: each module's tests keep their order


@pytest.fixture(autouse=True, scope="session")
def fact_reads_recorded_per_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The facts each deploy read last time (rigforge/reads/read_ahead.py) are recorded in this session's own
    folder: a run of the suite never reads ahead what another run, or the user's own deploys, recorded.
    pyinfra runs started by the tests inherit it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIGFORGE_READS_DIR", str(tmp_path_factory.mktemp("fact-reads")))
        yield


def judges_engine_speed(request: pytest.FixtureRequest) -> bool:
    """Whether the requesting test's module is one of ENGINE_SPEED_MODULES."""
    return worker_group(str(request.path)) == "engine-speed"


@pytest.fixture(scope="module", autouse=True)
def yield_cpu_to_engine_speed(request: pytest.FixtureRequest) -> None:
    """On a pytest-xdist worker, every module but the engine-speed ones runs niced (what it starts inherits it):
    the speed modules, which run first on the other worker, measure their engines and not this worker's load."""
    if hasattr(request.config, "workerinput") and not judges_engine_speed(request):
        current = os.nice(0)
        if current < YIELDING_NICENESS:
            os.nice(YIELDING_NICENESS - current)
