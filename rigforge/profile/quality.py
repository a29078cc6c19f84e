"""The profile's quality settings (``bench.quality``): the pass every bench runs beside speed, the reference it is
judged against, and how far a recipe may move the model's answers (rigforge/quality/, docs/bench.md#quality)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator

from rigforge.profile.types import SafeText, StrictModel

#: The corpus every quality pass reads (read here by path: rigforge.quality imports the profile package).
CORPUS_PATH = Path(__file__).resolve().parents[1] / "quality" / "corpus.json"


def corpus_size(path: Path = CORPUS_PATH) -> int:
    """How many texts the shipped corpus has."""
    return len(json.loads(path.read_text(encoding="utf-8"))["texts"])


class TaskScore(StrictModel):
    """A graded task set through the same API (GSM8K-style, rigforge/quality/tasks.py); off where it means
    nothing (a model too small to solve it; rigforge/quality/word_problems.py makes the set)."""

    enabled: bool
    reason: SafeText  # why it is on or off for this model
    # Which shipped set (rigforge/quality/word_problems.py's SETS): multi-step word problems, or one-step ones.
    set: Literal["word-problems", "one-step"]
    # Worked examples before every question (the set's first lines), and graded questions after them.
    shots: Annotated[int, Field(ge=0, le=16)]
    questions: Annotated[int, Field(ge=1, le=2000)]
    # Tokens an answer may take (greedy; it stops earlier at the next "Question:").
    max_tokens: Annotated[int, Field(ge=16, le=2048)]
    # Questions in flight at once.
    concurrency: Annotated[int, Field(ge=1, le=512)]
    # Percentage points the score may drop below the reference's before the answers differ (the drop's paired 95 %
    # interval, question by question, must lie wholly past it).
    max_drop_points: Annotated[float, Field(gt=0, le=100)]


class Quality(StrictModel):
    enabled: bool
    # The recipe whose answers are the model's reference; None: the profile's default recipe (engine.recipe).
    reference_recipe: str | None
    # Log-probabilities read per position (the KLD is a top-k approximation over these).
    top_k: Annotated[int, Field(ge=1, le=20)]
    # How many of the corpus's texts a pass reads, its first ones; None: all of them.
    texts: Annotated[int, Field(ge=1)] | None
    # Tokens generated per text where the engine has no prompt logprobs (llama.cpp: greedy with re-sync).
    max_tokens: Annotated[int, Field(ge=1, le=512)]
    # Re-synchronisations a text may take before the rest of it is left unmeasured (bounds a pass's time).
    max_resyncs: Annotated[int, Field(ge=0, le=64)]
    # Mean top-k KLD (nats) against the reference past which a recipe's answers differ (vetoes "better").
    max_mean_kld: Annotated[float, Field(gt=0)]
    reason: SafeText  # where max_mean_kld comes from, for this model
    task_score: TaskScore

    @field_validator("texts")
    @classmethod
    def _within_the_corpus(cls, value: int | None) -> int | None:
        """At most the corpus's texts: more would silently read them all (and a reader would think otherwise)."""
        if value is not None and value > (size := corpus_size()):
            raise ValueError(f"the corpus (rigforge/quality/corpus.json) has {size} texts, so at most {size}; "
                             "null reads them all")
        return value
