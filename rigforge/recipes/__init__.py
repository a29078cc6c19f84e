"""Engine recipes on the rig: which one a rig runs (``choice``), the experiment that tries them and its report
(``report``), and published command lines compared with what rigforge renders (``published``).

The recipes themselves are profile data: ``engine.recipes`` (schema: rigforge/profile/recipes.py).

May import: updates, bench_runs, serving, bench, profile.
"""
