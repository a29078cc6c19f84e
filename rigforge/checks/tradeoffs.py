"""Security trade-offs a profile makes on purpose, said before they are made: one line each, nothing refused.

A profile may give up a safe default for speed or because every published command does: CPU vulnerability
mitigations off on the kernel command line, an engine answering beyond loopback, a model's own Python code
run by the engine. Each is named with what it gives up, where the profile's value comes from, and the
profile field that keeps the safe default. The what-is-already-there table shows them as ``trade-off`` rows
and every run (a dry run too) prints the lines; the owner decides, knowingly.

Example::

    for line in tradeoff_lines(profile):
        host.log(line)
"""

from __future__ import annotations

from dataclasses import dataclass

from rigforge.profile import Profile
from rigforge.profile.access import listens_beyond_loopback
from rigforge.serving.api_key import needs_api_key

#: Kernel parameters that switch off a CPU vulnerability mitigation (the kernel's admin-guide names them),
#: with the rig-facts section that documents each on the profiles' rigs.
MITIGATION_PARAMS: dict[str, str] = {
    "mitigations=off": "§1.4",
    "spectre_v2=off": "§4.2",
    "spec_store_bypass_disable=off": "§4.2",
    "l1tf=off": "§4.2",
    "mds=off": "§4.2",
    "tsx_async_abort=off": "§4.2",
    "srbds=off": "§4.2",
    "mmio_stale_data=off": "§4.2",
    "retbleed=off": "§4.2",
    "nospectre_v1": "",
    "nospectre_v2": "",
    "nopti": "",
    "pti=off": "",
    "spectre_v1=off": "",
}
TRUST_REMOTE_CODE = "--trust-remote-code"
#: The published launch commands behind the three GPU profiles.
PUBLISHED_COMMANDS = "rig-facts §2.4, §3.3, §4.4"


@dataclass(frozen=True)
class TradeOff:
    """One safe default given up: the setting, what it gives up, the value's source, how to keep the default."""

    setting: str
    gives_up: str
    source: str
    safe_default: str

    def line(self) -> str:
        return (f"trade-off: {self.setting}: gives up {self.gives_up}; source: {self.source}; "
                f"to keep the safe default: {self.safe_default}")


def mitigations_off(profile: Profile) -> list[TradeOff]:
    """The kernel parameters that turn CPU vulnerability mitigations off, as one trade-off."""
    params = [param for param in profile.boot.kernel_params if param in MITIGATION_PARAMS]
    if not params:
        return []
    sections = sorted({MITIGATION_PARAMS[param] for param in params} - {""})
    source = f"rig-facts {', '.join(sections)}" if sections else "not in rig-facts"
    return [TradeOff(
        setting=f"boot.kernel_params {' '.join(params)}",
        gives_up="the kernel's defences against CPU side channels (Spectre, Meltdown, MDS, L1TF…): code running on "
                 "this rig (another user, a container, a model's remote code) may read the kernel's and other "
                 "processes' memory",
        source=f"{source} (the documented rigs boot with them)",
        safe_default=f"remove {' '.join(params)} from boot.kernel_params (one reboot)")]


def served_beyond_loopback(profile: Profile) -> list[TradeOff]:
    """An engine bound beyond loopback: reachable from the network, over plain HTTP, with or without a key."""
    engine = profile.engine
    if not listens_beyond_loopback(engine.host):
        return []
    port = f"{engine.host}:{engine.port}"
    if needs_api_key(profile):
        gives_up = (f"a loopback-only engine: {port} answers every network that reaches the rig, over plain HTTP "
                    "(prompts, answers and the API key cross it unencrypted); requests need the rig's API key")
    else:
        gives_up = (f"any access control: {port} serves the model to whoever reaches the rig, over plain HTTP, "
                    f"without a key (engine.auth none: {engine.auth.reason})")
    return [TradeOff(
        setting=f"engine.host {engine.host}", gives_up=gives_up,
        source=f"{PUBLISHED_COMMANDS} (every published launch command binds 0.0.0.0)",
        safe_default="engine.host: 127.0.0.1 (reach it through ssh -L or a TLS proxy on the rig)")]


def metrics_beyond_loopback(profile: Profile) -> list[TradeOff]:
    """node_exporter or rigforge's Prometheus bound beyond loopback: the rig's health readable without a key."""
    monitoring = profile.monitoring
    listeners = [(f"monitoring.node_exporter.listen_host {monitoring.node_exporter.listen_host}",
                  f"{monitoring.node_exporter.listen_host}:{monitoring.node_exporter.port}",
                  monitoring.enabled and monitoring.node_exporter.install),
                 (f"monitoring.prometheus.listen_host {monitoring.prometheus.listen_host}",
                  f"{monitoring.prometheus.listen_host}:{monitoring.prometheus.port}",
                  monitoring.enabled and monitoring.prometheus.install)]
    return [TradeOff(
        setting=setting,
        gives_up=f"a loopback-only listener: {address} answers every network that reaches the rig, over plain HTTP "
                 "and without a key (GPU, driver, engine and log-failure metrics; no prompt, answer or key)",
        source="Prometheus scrapes over the network (a Prometheus on another machine cannot reach loopback)",
        safe_default=f"{setting.split()[0]}: 127.0.0.1 (a Prometheus on the rig itself, or scrape through ssh -L)")
        for setting, address, used in listeners if used and listens_beyond_loopback(setting.split()[1])]


def gateway_beyond_loopback(profile: Profile) -> list[TradeOff]:
    """The fleet's gateway bound beyond loopback: its users' keys over plain HTTP (and its metrics without one)."""
    gateway = profile.gateway
    if not gateway.install:
        return []
    lines = []
    if listens_beyond_loopback(gateway.listen_host):
        lines.append(TradeOff(
            setting=f"gateway.listen_host {gateway.listen_host}",
            gives_up=f"a loopback-only endpoint: {gateway.listen_host}:{gateway.port} answers every network that "
                     "reaches this host, over plain HTTP (prompts, answers and the users' keys readable on the wire; "
                     "every request needs a key)",
            source="the gateway's purpose: one endpoint for the owner's users (docs/fleet.md)",
            safe_default="gateway.listen_host: 127.0.0.1 (users reach it through ssh -L)"))
    if listens_beyond_loopback(gateway.metrics_listen_host):
        lines.append(TradeOff(
            setting=f"gateway.metrics_listen_host {gateway.metrics_listen_host}",
            gives_up=f"a loopback-only listener: {gateway.metrics_listen_host}:{gateway.metrics_port} answers "
                     "without a key (per-rig request counts and states; no prompt, answer or key)",
            source="a Prometheus on another machine scrapes it",
            safe_default="gateway.metrics_listen_host: 127.0.0.1 (a Prometheus on the gateway host)"))
    return lines


def remote_code_trusted(profile: Profile) -> list[TradeOff]:
    """``--trust-remote-code``: the engine imports Python shipped with the model."""
    if profile.engine.flags.get(TRUST_REMOTE_CODE) is not True:
        return []
    model = profile.model
    origin = f"{model.repo_id}@{model.revision}" if model.repo_id else model.path
    return [TradeOff(
        setting=f"engine.flags {TRUST_REMOTE_CODE}",
        gives_up=f"running only the engine's own code: the engine imports Python shipped with the model ({origin}) "
                 "as root in its container, so whoever can change that repository runs code on this rig",
        source=f"{PUBLISHED_COMMANDS} (every published launch command passes it)",
        safe_default=f"remove {TRUST_REMOTE_CODE} from engine.flags (for a model the engine supports natively), "
                     "and pin model.revision to a commit you have read")]


def tradeoffs(profile: Profile) -> list[TradeOff]:
    """Every trade-off the profile makes, in a fixed order."""
    return [*mitigations_off(profile), *served_beyond_loopback(profile), *metrics_beyond_loopback(profile),
            *remote_code_trusted(profile)]


def tradeoff_lines(profile: Profile) -> list[str]:
    """One line per trade-off, for the run's log."""
    return [tradeoff.line() for tradeoff in tradeoffs(profile)]
