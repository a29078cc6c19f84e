"""Known failures recognised from logs: the signatures (inventory/known-failures.yaml) and their matcher.

``schema`` loads and validates the signatures; ``match`` (standard library only, it also runs on the
rig) finds them in log lines. Readers: the health wait, the known-failures check, the doctor, the bench.

May import: profile.
"""

from rigforge.known_failures.match import Hit, hit_line, match_lines
from rigforge.known_failures.schema import (
    KnownFailureError,
    Signature,
    known_signatures,
    load_signatures,
    needles,
    signature_data,
)

__all__ = [
    "Hit",
    "KnownFailureError",
    "Signature",
    "hit_line",
    "known_signatures",
    "load_signatures",
    "match_lines",
    "needles",
    "signature_data",
]
