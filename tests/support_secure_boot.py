"""The SecureBoot fact's output for a host in a given state, section by section as its command prints it.

For states no machine here can show (Secure Boot on): the lines inside are mokutil 0.6.0's own strings,
given by each test (tests/fixtures/secure-boot/README.md says why nothing here can capture them).
"""

from __future__ import annotations


def fact_output(sb_state: str | None, keys: dict[str, str] | None = None, os_id: str = "debian",
                framework: str = "", efi: str = "none") -> str:
    """``sb_state``: what ``mokutil --sb-state`` printed (None: no mokutil); ``keys``: certificate found ->
    what ``mokutil --test-key`` printed; ``efi``: the SecureBoot EFI variable's byte, or ``none`` (no EFI)."""
    text = f"## os\n{os_id}\n## framework\n{framework}\n## efi\n{efi}\n"
    if sb_state is not None:
        text += f"## sb-state\n{sb_state}\n"
    for cert, answer in (keys or {}).items():
        text += f"## found {cert}\n" + (f"## test-key {cert}\n{answer}\n" if sb_state is not None else "")
    return text
