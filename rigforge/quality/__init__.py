"""The model's answers measured beside its speed: the reference per model and revision with its A/A noise
(``reference``; the fixed public-domain corpus in ``corpus.json``), a pass against it as top-k KLD, same top
token and first divergence (``kld``), the judgement of a run's answers (``judge``; the tournament's veto is
rigforge/recipes/quality_veto.py) and the graded task score's machinery (``tasks``). The rig's side is
rigforge/bench/quality.py.

May import: bench, profile.
"""
