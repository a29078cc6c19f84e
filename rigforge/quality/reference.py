"""The model's reference on the controller: one quality pass per model and revision, and its own A/A noise.

``results/references/<model key>.json`` holds the pass of the profile's reference recipe (``bench.quality.
reference_recipe``, else the default recipe) from the first bench that measured it, the engine start it ran in,
and — once the same recipe was measured in another engine start — the A/A noise: that pass against the first
(GPU kernels and even llama.cpp's prompt cache are not bit-exact between starts). A reference made elsewhere (a
BF16 or FP8 checkpoint's pass, as the wiki's KLD page uses) is imported with ``python -m
rigforge.quality.reference_import`` (checked, written atomically, its origin kept under ``imported``).

Example::

    key = model_key(profile.model)                  # 'gemma-3-270m-q4_k_m.gguf@a5fd3b62230a'
    reference = load_reference(results_root(), key)
    config = quality_config(profile.bench.quality, "llama.cpp", reference)
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rigforge.bench.quality import METHODS
from rigforge.profile import Model
from rigforge.profile.quality import Quality
from rigforge.quality.kld import listed_k
from rigforge.quality.tasks import task_block

CORPUS_PATH = Path(__file__).resolve().parent / "corpus.json"
#: The most log-probabilities a position every engine lists: vLLM's default ``max_logprobs`` is 20 (OpenAI's own
#: limit); llama.cpp and SGLang list more.
ENGINE_MAX_TOP_K = 20


def model_key(model: Model) -> str:
    """The model and its revision, safe as a file name: repository@revision, or file names@first file's hash.

    >>> from rigforge.profile.loader import load_profile
    >>> model_key(load_profile("sandbox").model)
    'gemma-3-270m-q4_k_m.gguf@a5fd3b62230a'
    """
    if model.repo_id:
        name, revision = model.repo_id, model.revision or "main"
    else:
        name = "+".join(file.name for file in model.files) or model.path
        revision = next((file.sha256[:12] for file in model.files if file.sha256), "unversioned")
    return re.sub(r"[^A-Za-z0-9._@+-]", "_", f"{name}@{revision}")


def reference_path(results_dir: Path, key: str) -> Path:
    """Where a model's reference lives on the controller."""
    return results_dir / "references" / f"{key}.json"


def load_reference(results_dir: Path, key: str) -> dict[str, Any] | None:
    """The stored reference, None when none was recorded (or the file is unreadable: it is then recorded anew)."""
    try:
        data = json.loads(reference_path(results_dir, key).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("pass"), dict) else None


def save_reference(results_dir: Path, key: str, reference: Mapping[str, Any]) -> Path:
    """Write the reference whole, then rename it into place."""
    path = reference_path(results_dir, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.new")
    temporary.write_text(json.dumps(reference, indent=1) + "\n")
    os.replace(temporary, path)
    return path


def outdated(reference: Mapping[str, Any], corpus: str, method: str) -> str | None:
    """Why a reference recorded here can no longer be compared with any pass this rigforge measures (another corpus
    version, another engine method), None while it can. An imported one is never outdated here: it came from
    elsewhere, so its refusal tells the owner to import one again.

    >>> outdated({"pass": {"corpus": "kjv-v1", "method": "greedy"}}, "pd-mixed-v2", "greedy")
    "recorded with corpus 'kjv-v1', and this rigforge reads corpus 'pd-mixed-v2'"
    >>> outdated({"pass": {"corpus": "kjv-v1", "method": "forced"}, "imported": {}}, "pd-mixed-v2", "greedy") is None
    True
    """
    if "imported" in reference:
        return None
    passed = reference["pass"]
    if passed.get("corpus") != corpus:
        return f"recorded with corpus {passed.get('corpus')!r}, and this rigforge reads corpus {corpus!r}"
    if passed.get("method") != method:
        return f"recorded with method {passed.get('method')!r}, and this engine is now measured with {method!r}"
    return None


def retire_reference(results_dir: Path, key: str, stamp: str) -> Path:
    """Move a reference aside (``references/retired/<key>.<stamp>.json``), never deleting it; the next bench of the
    reference recipe records a new one. Returns where it went."""
    path = reference_path(results_dir, key)
    retired = results_dir / "references" / "retired" / f"{key}.{stamp}.json"
    retired.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, retired)
    return retired


def provenance(reference: Mapping[str, Any]) -> str:
    """Where a stored reference came from, in words (the report shows it beside every verdict that used it).

    >>> provenance({"recipe": "default", "run": "results/sb/20261127T0900Z"})
    'recorded from recipe default in run results/sb/20261127T0900Z'
    >>> provenance({"recipe": "bf16", "imported": {"from": "/x/ref.json", "at": "2026-11-27T09:40Z",
    ...                                            "checkpoint": "org/model-BF16@abc"}})
    'imported 2026-11-27T09:40Z from /x/ref.json (recipe bf16, checkpoint org/model-BF16@abc)'
    """
    imported = reference.get("imported")
    if not imported:
        return f"recorded from recipe {reference.get('recipe')} in run {reference.get('run')}"
    said = [f"recipe {reference['recipe']}"] if reference.get("recipe") else []
    said += [f"checkpoint {imported['checkpoint']}"] if imported.get("checkpoint") else []
    return f"imported {imported.get('at')} from {imported.get('from')}" + (f" ({', '.join(said)})" if said else "")


def against_block(reference: Mapping[str, Any], key: str, measured: Mapping[str, Any], tolerance: float) -> \
        dict[str, Any]:
    """A result's ``quality.against_reference``: the comparison (``QualityMeasure.as_dict()``), which reference it
    used and where that came from, the tolerance and the reference's A/A noise.

    + reference: the stored reference
    + key: its model key
    + measured: the pass compared with it
    + tolerance: the profile's ``bench.quality.max_mean_kld``
    """
    return {**measured, "reference": key,
            # an imported reference's recipe ran elsewhere: no pass here is its A/A
            "reference_recipe": None if reference.get("imported") else reference.get("recipe"),
            "imported": bool(reference.get("imported")), "reference_source": provenance(reference),
            "tolerance": tolerance, "noise": reference.get("noise")}


def load_corpus(path: Path = CORPUS_PATH) -> dict[str, Any]:
    """The fixed texts every quality pass reads (rigforge/quality/corpus.json: source and licence inside)."""
    return json.loads(path.read_text())


def candidate_top_k(top_k: int, reference: Mapping[str, Any] | None) -> int:
    """The k a pass asks for: the profile's, raised to the reference's (up to ``ENGINE_MAX_TOP_K``), so a candidate
    never lists fewer tokens than its reference (kld.py compares at the common k: fewer would lose precision).

    >>> candidate_top_k(8, {"pass": {"top_k": 20, "texts": []}}), candidate_top_k(20, None)
    (20, 20)
    """
    if reference is None:
        return top_k
    return max(top_k, min(listed_k(reference["pass"]), ENGINE_MAX_TOP_K))


def quality_config(quality: Quality, engine: str, reference: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The bench config's ``quality`` block (None when the profile turns it off).

    + quality: the profile's ``bench.quality``
    + engine: the profile's engine kind (llama.cpp: greedy with re-sync; vLLM, SGLang: teacher forcing)
    + reference: the stored reference (its tokens keep a greedy pass on its path), None to record one
    """
    if not quality.enabled:
        return None
    task_score = task_block(quality.task_score)  # refused with its reason where the set is missing
    corpus = load_corpus()
    tokens = None
    if reference is not None and reference["pass"].get("method") == "greedy":
        tokens = {text["id"]: [step["token"] for step in text["steps"]] for text in reference["pass"]["texts"]}
    return {"engine": engine, "method": METHODS[engine], "top_k": candidate_top_k(quality.top_k, reference),
            "max_tokens": quality.max_tokens,
            "max_resyncs": quality.max_resyncs, "corpus": corpus["corpus"],
            "texts": [{"id": text["id"], "text": text["text"]} for text in corpus["texts"][:quality.texts]],
            "reference_tokens": tokens, "task_score": task_score}
