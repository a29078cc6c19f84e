"""What the rigs of one run settle together, on the controller: the commits a build's git refs stand for, once
per fleet (``image_commits``), one build per fleet, copied from the rig that has it (``image_share``), and who
serves what behind the fleet's gateway, with whether a rig may leave its rotation (``rotation``).

It reads facts (the rigs' image records, ``git ls-remote``) and runs inside the images role's operations, so it
sits above ``facts`` and below ``operations``.

May import: facts, reads, serving, images, profile.
"""
