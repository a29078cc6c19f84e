"""Settings every test shares."""

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def fact_reads_recorded_per_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The facts each deploy read last time (rigforge/reads/read_ahead.py) are recorded in this session's own
    folder: a run of the suite never reads ahead what another run, or the user's own deploys, recorded.
    pyinfra runs started by the tests inherit it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIGFORGE_READS_DIR", str(tmp_path_factory.mktemp("fact-reads")))
        yield
