"""The model's answers measured beside its speed: the reference per model and revision with its A/A noise
(``reference``; one made elsewhere imported by ``reference_import``; the fixed public-domain corpus in
``corpus.json``), a pass against it as top-k KLD, same top token and first divergence (``kld``), the judgement of a
run's answers (``judge``) and of a recipe's over all its engine starts (``over_starts``; the tournament's veto is
rigforge/recipes/quality_veto.py) and the graded task score's machinery (``tasks``). The rig's side is
rigforge/bench/quality.py.

May import: bench, bench_runs, profile.
"""
