"""Who may call the engine's API: the profile's ``engine.auth`` and where the engine listens.

The engine's address decides the default: an engine on loopback (127.0.0.0/8) answers only processes of the
rig itself; one on any other address (``0.0.0.0``, a LAN address) answers whoever reaches its port, and then
every request must carry the rig's API key unless the profile says, with a reason, that it may not.

Example::

    EngineAuth(mode="none", reason="behind the site's authenticating proxy")
    listens_beyond_loopback("0.0.0.0")   # True
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import AfterValidator, ValidationInfo, field_validator

from rigforge.profile.types import CliFlag, SafeText, StrictModel

#: Each mode, as base.yaml declares it.
AUTH_MODES = ("auto", "key", "none")


class EngineAuth(StrictModel):
    """``engine.auth``: auto (a key beyond loopback), key (always) or none (never; a reason is required).

    ``reason`` is declared before ``mode`` so that the check of mode sees it (and an error names the file that set
    mode).
    """

    reason: SafeText | None = None  # why serving without a key is safe here; read only with mode none
    mode: Literal["auto", "key", "none"]

    @field_validator("mode")
    @classmethod
    def _none_says_why(cls, mode: str, info: ValidationInfo) -> str:
        reason = info.data.get("reason")
        if mode == "none" and not (reason or "").strip():
            raise ValueError("none serves the engine without an API key: set engine.auth.reason too (why that is "
                             "safe here, e.g. 'behind the site's authenticating proxy'), or use auto or key")
        if mode != "none" and reason is not None:
            raise ValueError(f"engine.auth.reason is only read with mode none, not {mode}")
        return mode


def _not_the_api_key(flag: str) -> str:
    if flag == "--api-key":
        raise ValueError("--api-key must not be an engine flag (ps shows every process's command line): "
                         "engine.auth hands the engine its key from the rig's secrets folder")
    return flag


#: A flag of ``engine.flags``: any CLI flag but the API key's.
EngineFlag = Annotated[CliFlag, AfterValidator(_not_the_api_key)]


def listens_beyond_loopback(address: str) -> bool:
    """Whether an engine bound to ``address`` answers more than the rig's own processes.

    >>> listens_beyond_loopback("127.0.0.1"), listens_beyond_loopback("0.0.0.0")
    (False, True)
    """
    try:
        return not ipaddress.ip_address(address).is_loopback
    except ValueError:
        return True  # not an address this module can judge: the safe answer


def key_required(auth: EngineAuth, address: str) -> bool:
    """Whether every request to an engine bound to ``address`` must carry the API key."""
    if auth.mode == "auto":
        return listens_beyond_loopback(address)
    return auth.mode == "key"
