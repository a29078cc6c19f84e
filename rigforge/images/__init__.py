"""Engine images as plans: what a profile's ``engine.build`` renders and hashes into a tag (``plans``) and the
build's git refs, named and resolved (``git_refs``).

Pure: the rig's images, records and remotes are read by ``rigforge.facts.images``, settled for a run's rigs by
``rigforge.fleet`` and built by ``rigforge.operations.images``.

May import: render, profile.
"""
