"""How facts travel, apart from what they say: the read-ahead that answers a deploy's planning from one combined
read per host (``read_ahead``), the combined command and its sections (``combined``), and the text helpers the
fact parsers share (``parsing``). The facts themselves are ``rigforge.facts``.

May import: no other rigforge package (pyinfra only).
"""
