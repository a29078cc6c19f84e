"""Fixtures of the unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.host import Host
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_config, ctx_host, ctx_inventory, ctx_state
from pyinfra.facts.deb import DebPackages

from rigforge.facts.apt_transaction import AptTransactionRecord
from rigforge.facts.dpkg_state import DpkgState, DpkgUnfinished
from rigforge.facts.packages import DpkgPackages
from rigforge.profile.loader import load_profile


@pytest.fixture
def planning(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[State, Host, dict]]:
    """rigforge's apt operations planned through pyinfra's own API: ``@local`` with the sandbox profile (lock
    wait 10 minutes) and the facts of ``facts`` (``"read"``: the facts the operations read, in order)."""
    profile = load_profile("sandbox").model_dump(mode="json")
    inventory = Inventory((["@local"], {"rigforge_profile": profile}))
    state = State(inventory, Config())
    host = inventory.get_host("@local")
    state.set_stage(StateStage.Prepare)
    facts: dict = {DebPackages: {}, DpkgPackages: {}, DpkgUnfinished: DpkgState(), AptTransactionRecord: None,
                   "read": []}

    def get_fact(fact: type, *args: object, **kwargs: object) -> object:
        facts["read"].append(fact)
        return facts[fact]

    monkeypatch.setattr(host, "get_fact", get_fact)
    with ctx_state.use(state), ctx_inventory.use(inventory), ctx_config.use(state.config), ctx_host.use(host):
        yield state, host, facts
