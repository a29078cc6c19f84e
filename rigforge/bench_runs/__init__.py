"""The smoke bench seen from the controller: a run's client config, metadata and paths (``plan``), and its result
read into a table, a plot and a verdict (``report``).

The client itself is ``rigforge.bench`` (it runs on the rig); the bench role (roles/bench.py) reads the rig's
facts, the image it runs included, and hands them here.

May import: serving, bench, profile.
"""
