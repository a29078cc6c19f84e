"""Reaching a rig: the ``@rigforge/NAME`` SSH connector (``connector``), the checks made before logging in
(``first_contact``), a rig that goes away mid-run (``lost``) and the verify suite's host-key trust
(``verify_trust``). pyinfra and paramiko underneath.

May import: no other rigforge package (it is on the lowest layers but one).
"""
