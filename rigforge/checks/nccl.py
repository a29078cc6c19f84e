"""The host's /etc/nccl.conf against where the NCCL graph belongs: the engine's environment alone.

Every NCCL program on the rig reads /etc/nccl.conf, and NCCL fails the init of any communicator that lacks one
of the graph's GPUs (tests/fixtures/nccl/): a graph named there breaks the owner's NCCL jobs on fewer GPUs, a
second engine, nccl-tests on a pair. A rig provisioned when rigforge still wrote the line there shows it here
until the host layer runs.
"""

from __future__ import annotations

from rigforge.checks.model import Check, HostFacts, advice, deploy_fixes, ok
from rigforge.facts.nccl import NCCL_CONF
from rigforge.profile import Profile
from rigforge.profile.nccl_layout import GRAPH_VARIABLE, MISSING_DEVICE_LINE

NAME = "nccl-conf"


def check_nccl_conf(profile: Profile, facts: HostFacts) -> Check | None:
    """No NCCL graph in /etc/nccl.conf (None when the host has no such file: nothing there to judge)."""
    conf = facts.nccl_conf
    if conf is None:
        return None
    expected = f"no {GRAPH_VARIABLE} in {NCCL_CONF}"
    graph = conf.settings.get(GRAPH_VARIABLE)
    if graph is None:
        return ok(NAME, expected, f"{len(conf.settings)} NCCL settings, no {GRAPH_VARIABLE}")
    found = f"{GRAPH_VARIABLE}={graph} ({'rigforge' if conf.ours else 'not rigforge'}'s file)"
    harm = (f"every NCCL program on the rig loads that graph and fails on fewer GPUs than it names "
            f"('{MISSING_DEVICE_LINE}')")
    if profile.nccl is not None or conf.ours:
        return deploy_fixes(NAME, expected, found, f"{harm}: deploys/host.py writes {NCCL_CONF} without it (the "
                                                   "engine that needs the graph gets it in its own environment)")
    return advice(NAME, expected, found, f"{harm}: remove the line from {NCCL_CONF} and give the graph only to "
                                         "the program that needs it")
