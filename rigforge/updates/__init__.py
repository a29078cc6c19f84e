"""Driver updates measured and reversible: bench history (``history``), before/after comparison of one value per
engine start (``starts``; ``comparison``, under the profile's ``policy``) with a verdict that survives an A/A test
(``verdict``, its statistics in ``significance``; shared with the recipe tournament; rendered by
``compare_render``; the command line ``python -m rigforge.updates.compare``), the update record each host's
update leaves on the controller (``record``), and the fleet rolled one batch at a time
(``python -m rigforge.updates.rollout``); an engine build change on a serving rig, measured the same way
(``engine_change``).

May import: bench_runs, bench, profile.
"""
