"""Build pyinfra inventory entries for rigs, validating each host's profile before any connection."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rigforge.connection.connector import connector_host_name
from rigforge.profile.comments import DECLARING_FILES
from rigforge.profile.loader import PROFILES_DIR, ProfileError, load_profile

HostEntry = tuple[str, dict[str, Any]]

#: Host data an inventory entry may add beyond the SSH settings.
_ALLOWED_HOST_DATA = {"_sudo", "_sudo_user", "_sudo_password", "ssh_known_hosts_file", "ssh_config_file",
                      "ssh_password", "allow_reboot", "skip_preflight", "bench", "probe", "verify_weights",
                      # files on the machine running pyinfra holding the Hugging Face token, the engine's API key
                      # (first line of each)
                      "hf_token_file", "api_key_file", "probe_python", "break_lock",
                      # the address the fleet's gateway reaches this rig at (default: ssh_hostname)
                      "gateway_address"}

_HOSTNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,252}$")


def _fail(exc: ProfileError) -> SystemExit:
    """Stop pyinfra while it loads the inventory: one line, no traceback, nothing connected yet."""
    return SystemExit(f"rigforge: {exc}")


def rig_host(name: str, profile: str, ssh_hostname: str, ssh_user: str = "root",
             ssh_port: int = 22, ssh_key: str | None = None,
             profile_overrides: Mapping[str, Any] | None = None, **data: Any) -> HostEntry:
    """One real rig: SSH with host-key checking on, and its validated profile.

    + name: inventory name of the host
    + profile: profile file stem under ``inventory/profiles``
    + ssh_hostname: address or DNS name of the rig
    + ssh_user: login user (root, or a sudoer: then set ``_sudo=True``, and ``_sudo_password`` if sudo asks)
    + ssh_port: SSH port
    + ssh_key: private key path (None: the SSH agent / ~/.ssh defaults)
    + profile_overrides: settings merged over the profile for this host only
    + data: further pyinfra host data (``_sudo``, ``allow_reboot``…)

    Example: ``rig_host("rig2x-a", "2x-pix", "10.0.0.5", ssh_key="~/.ssh/rig")``
    """
    try:
        return _rig_host(name, profile, ssh_hostname, ssh_user, ssh_port, ssh_key, profile_overrides, data)
    except ProfileError as exc:
        raise _fail(exc) from None


def _rig_host(name: str, profile: str, ssh_hostname: str, ssh_user: str, ssh_port: int, ssh_key: str | None,
              profile_overrides: Mapping[str, Any] | None, data: dict[str, Any]) -> HostEntry:
    source = f"inventory host {name!r} profile_overrides"
    if not isinstance(ssh_hostname, str) or not _HOSTNAME.match(ssh_hostname):
        raise ProfileError(f"inventory host {name!r}: ssh_hostname {ssh_hostname!r} is not a host name or address")
    if not isinstance(ssh_port, int) or not 1 <= ssh_port <= 65535:
        raise ProfileError(f"inventory host {name!r}: ssh_port {ssh_port!r} must be an integer 1-65535")
    unknown = sorted(set(data) - _ALLOWED_HOST_DATA)
    if unknown:
        raise ProfileError(
            f"inventory host {name!r}: unknown setting {unknown[0]!r}; allowed: {', '.join(sorted(_ALLOWED_HOST_DATA))}"
        )
    host_data: dict[str, Any] = {
        "ssh_hostname": ssh_hostname,
        "ssh_user": ssh_user,
        "ssh_port": ssh_port,
        # Real rigs keep host-key checking on: an unknown key is a stop, not a prompt to accept.
        "ssh_strict_host_key_checking": "yes",
        # Stored as plain data (pyinfra prints and serialises host data); roles read it back typed.
        "rigforge_profile": load_profile(profile, profile_overrides, overrides_source=source).model_dump(mode="json"),
        **data,
    }
    if ssh_key:
        host_data["ssh_key"] = str(Path(ssh_key).expanduser())
    # Through rigforge's connector: key file and host key are checked first, one line per host on a problem.
    return connector_host_name(name), host_data


#: The environment variable naming the profile of the rig rigforge runs on (inventory/local.py).
LOCAL_PROFILE_ENV = "RIGFORGE_PROFILE"
#: pyinfra's name for the machine it runs on: commands run there directly, no SSH.
LOCAL_HOST = "@local"


def local_host(profile: str | None = None, profile_overrides: Mapping[str, Any] | None = None,
               environ: Mapping[str, str] | None = None, **data: Any) -> HostEntry:
    """The machine pyinfra runs on, as a rig: one rig and no second machine to drive it from.

    + profile: profile file stem under ``inventory/profiles``; None: the ``RIGFORGE_PROFILE`` variable
    + profile_overrides: settings merged over the profile
    + environ: where ``RIGFORGE_PROFILE`` is read (default: this process's environment)
    + data: further pyinfra host data (``_sudo``, ``allow_reboot``…), as for ``rig_host``

    Example: ``local_host("2x-pix")`` or, with ``RIGFORGE_PROFILE=2x-pix`` set, ``local_host()``
    """
    name = profile or (os.environ if environ is None else environ).get(LOCAL_PROFILE_ENV, "")
    try:
        if not name:
            known = ", ".join(sorted(path.stem for path in PROFILES_DIR.glob("*.yaml")
                                     if path.stem not in DECLARING_FILES))
            raise ProfileError(f"inventory/local.py: no profile: set {LOCAL_PROFILE_ENV} to one of {known} "
                               f"(e.g. {LOCAL_PROFILE_ENV}=2x-pix pyinfra inventory/local.py deploys/preflight.py)")
        unknown = sorted(set(data) - _ALLOWED_HOST_DATA)
        if unknown:
            raise ProfileError(f"inventory host {LOCAL_HOST!r}: unknown setting {unknown[0]!r}; allowed: "
                               f"{', '.join(sorted(_ALLOWED_HOST_DATA))}")
        loaded = load_profile(name, profile_overrides, overrides_source=f"inventory host {LOCAL_HOST!r} "
                                                                         "profile_overrides")
    except ProfileError as exc:
        raise _fail(exc) from None
    return LOCAL_HOST, {"rigforge_profile": loaded.model_dump(mode="json"), **data}


def sandbox_hosts(state_dir: Path | str = ".sandbox", profile: str = "sandbox",
                  overrides: Mapping[str, Any] | None = None, names: list[str] | None = None) -> list[HostEntry]:
    """The sandbox hosts started by ``python -m rigforge.sandbox up``, with the given profile.

    + state_dir: where ``rigforge.sandbox`` keeps state.json, the key and known_hosts
    + profile: profile file stem (the sandbox profile, or a GPU profile with test overrides)
    + overrides: settings merged over the profile (e.g. a stand-in apt repository)
    + names: only these sandbox hosts (default: all)
    """
    from rigforge.sandbox import load_state

    try:
        state = load_state(Path(state_dir))
    except FileNotFoundError:
        raise SystemExit(
            f"rigforge: {state_dir}/state.json: no sandbox hosts yet; start them with `python -m rigforge.sandbox up`"
        ) from None
    try:
        loaded = load_profile(profile, overrides, overrides_source=f"{state_dir} sandbox overrides")
    except ProfileError as exc:
        raise _fail(exc) from None
    entries = []
    for sandbox_host in state.hosts:
        if names is None or sandbox_host.name in names:
            # The sandbox pins its own known_hosts, written when the hosts start; checking stays strict.
            data = {**state.host_data(sandbox_host), "rigforge_profile": loaded.model_dump(mode="json")}
            entries.append((sandbox_host.name, data))
    return entries
