"""``python -m rigforge.quality.reference_import``: make another run's quality pass the model's reference here.

The wiki measures quantizations against a BF16 or FP8 checkpoint's answers; rigforge records its reference from the
profile's reference recipe at converge, and this imports one made elsewhere instead: a reference file
(``results/references/<model>@<revision>.json`` of another controller) or a bench result (``result.json`` whose
``quality`` is a pass), from another rig, recipe or checkpoint.

Usage::

    python -m rigforge.quality.reference_import other/references/org_GLM-5-FP8@abc.json \\
        --model org/GLM-5-NVFP4 --revision 1a2b3c --checkpoint org/GLM-5-FP8@abc [--noise-from other/run2/result.json]
    python -m rigforge.quality.reference_import other/run/result.json --profile sandbox --replace

Everything is checked before anything is written: the file's shape, field by field (one message naming the file,
the field and what is allowed); the corpus version (another corpus measures other texts: refused); the method
against the profile's engine (with ``--profile``); the tokenizer against this model's passes on this controller
(the stored reference, else the newest result compared with it: other token ids for the same text mean another
tokenizer, and KLD needs the same vocabulary: refused). An existing reference is replaced only with ``--replace``
(the old file is kept beside it). The file is written whole, then renamed; ``imported`` says from which file, run,
recipe and checkpoint, and when. Its A/A noise is the source's own (a reference file's ``noise``) or, with
``--noise-from``, the source's recipe measured in another engine start. A pass here against it measures the
checkpoints' gap, not its noise, and every recipe sits at that gap: one pass against an imported reference is never
"differ" (rigforge/quality/judge.py), and a tournament judges each recipe relative to the start recipe's gap
(rigforge/quality/over_starts.py). Its passes are compared at the common top_k with this rig's (kld.py), and a
candidate asks at least the imported pass's k (reference.py ``candidate_top_k``).
Exit status: 0 imported (or would be, with ``--dry``), 2 bad input or refused (one message on stderr).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rigforge.bench.quality import METHODS, PREFILL
from rigforge.bench_runs.plan import results_root
from rigforge.quality.kld import compare_passes, tokenizer_mismatch
from rigforge.quality.reference import load_corpus, load_reference, provenance, reference_path, save_reference


class RefusedImport(ValueError):
    """The input cannot become the reference: the message names the file, the field and what is allowed."""


def key_of(model: str, revision: str) -> str:
    """The reference key rigforge/quality/reference.py's ``model_key`` gives that model and revision.

    >>> key_of("org/GLM-5-NVFP4", "1a2b3c")
    'org_GLM-5-NVFP4@1a2b3c'
    """
    return re.sub(r"[^A-Za-z0-9._@+-]", "_", f"{model}@{revision}")


def read_source(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the pass, where it came from: recipe, run, engine start, checkpoint, noise) of a reference or result file."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise RefusedImport(f"{path}: not a readable JSON file ({error})") from error
    if isinstance(data, dict) and isinstance(data.get("pass"), dict):
        return data["pass"], {"field": "pass.", "recipe": data.get("recipe"), "run": data.get("run"),
                              "checkpoint": data.get("model"), "engine_start": data.get("engine_start"),
                              "noise": data.get("noise")}
    if isinstance(data, dict) and isinstance(data.get("quality"), dict):
        meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
        checkpoint = f"{meta['model']}@{meta.get('model_revision')}" if meta.get("model") else None
        return data["quality"], {"field": "quality.", "recipe": meta.get("recipe"), "run": str(path.resolve().parent),
                                 "checkpoint": checkpoint, "engine_start": meta.get("engine_start"), "noise": None}
    if isinstance(data, dict) and "quality" in data and data["quality"] is None:
        raise _field(path, "quality", "is null: that bench ran no quality pass", "a result whose quality pass ran")
    if isinstance(data, dict) and "texts" in data and "corpus" in data:  # a pass alone (a result's quality block)
        return data, {"field": "", "recipe": None, "run": str(path.resolve().parent), "checkpoint": None,
                      "engine_start": None, "noise": None}
    raise RefusedImport(f"{path}: neither a reference (an object with field 'pass') nor a bench result with a quality "
                        "pass (field 'quality' an object) nor a pass (fields 'corpus', 'texts'): allowed are "
                        "results/references/<model>.json, a result.json of a bench that ran the quality pass, or that "
                        "pass alone")


def _field(path: Path, field: str, what: str, allowed: str) -> RefusedImport:
    return RefusedImport(f"{path}: field {field} {what}; allowed: {allowed}")


def check_step(path: Path, where: str, step: Any) -> None:
    """One position: ``{"token": id, "top": [[id, logprob], …]}`` with finite logprobs of at most 0."""
    if not isinstance(step, dict) or isinstance(step.get("token"), bool) or not isinstance(step.get("token"), int):
        raise _field(path, f"{where}.token", "is missing or not an integer", "the token id at that position")
    top = step.get("top")
    if not isinstance(top, list) or not all(
            isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], int) and not isinstance(pair[0], bool)
            and isinstance(pair[1], (int, float)) and math.isfinite(pair[1]) and pair[1] <= 0 for pair in top):
        raise _field(path, f"{where}.top", f"is {str(top)[:80]}", "a list of [token id, log-probability <= 0]")


def check_pass(path: Path, passed: Mapping[str, Any], corpus: Mapping[str, Any], method: str | None,
               prefix: str = "pass.") -> list[str]:
    """Raise RefusedImport at the first field that cannot be a reference; the texts it holds, by id.

    + path: the file (named in every message)
    + passed: its pass (``pass`` of a reference, ``quality`` of a result)
    + corpus: this rigforge's corpus (rigforge/quality/corpus.json)
    + method: the method the profile's engine measures with (None: not checked, no profile given)
    + prefix: where the pass is in the file (``pass.`` of a reference, ``quality.`` of a result, "" bare)
    """
    if passed.get("corpus") != corpus["corpus"]:
        raise _field(path, f"{prefix}corpus", f"is {passed.get('corpus')!r}: another corpus version measures other "
                     "texts, so no pass here could be compared with it", f"{corpus['corpus']!r} "
                     "(rigforge/quality/corpus.json)")
    allowed = sorted(set(METHODS.values()))
    if passed.get("method") not in allowed:
        raise _field(path, f"{prefix}method", f"is {passed.get('method')!r}", " or ".join(map(repr, allowed)))
    if method is not None and passed["method"] != method:
        raise _field(path, f"{prefix}method", f"is {passed['method']!r} but the profile's engine measures "
                     f"{method!r}: the passes would not be comparable", repr(method))
    ids = {text["id"] for text in corpus["texts"]}
    ids |= {text_id + PREFILL for text_id in ids}  # vLLM's and SGLang's teacher-forced record of a text
    texts = passed.get("texts")
    if not isinstance(texts, list) or not texts:
        raise _field(path, f"{prefix}texts", "is missing or empty", "a list of the corpus's texts, each measured")
    for index, text in enumerate(texts):
        where = f"{prefix}texts[{index}]"
        if not isinstance(text, dict) or not isinstance(text.get("id"), str) or text["id"] not in ids:
            raise _field(path, f"{where}.id", f"is {(text or {}).get('id') if isinstance(text, dict) else text!r}",
                         f"one of the corpus's texts {sorted(ids)}")
        prompt = text.get("prompt_ids")
        if not isinstance(prompt, list) or not prompt or not all(
                isinstance(token, int) and not isinstance(token, bool) for token in prompt):
            raise _field(path, f"{where}.prompt_ids", "is missing or not a list of token ids",
                         "the text's prompt as the engine tokenized it")
        if not isinstance(text.get("steps"), list):
            raise _field(path, f"{where}.steps", "is missing", "a list of positions (empty where the text failed)")
        for number, step in enumerate(text["steps"]):
            check_step(path, f"{where}.steps[{number}]", step)
    if not any(text["steps"] for text in texts):
        raise _field(path, f"{prefix}texts", "hold no measured position (every text failed)",
                     "a pass with at least one measured text")
    return [text["id"] for text in texts]


def local_prompts(results_dir: Path, key: str) -> tuple[str, dict[str, list[int]]] | None:
    """(where, text id -> prompt ids) of this model's pass on this controller: its stored reference, else the
    newest result compared with it; None when this controller measured none."""
    stored = load_reference(results_dir, key)
    if stored is not None:
        return str(reference_path(results_dir, key)), {text["id"]: text.get("prompt_ids") or []
                                                        for text in stored["pass"].get("texts") or []}
    for result in sorted(results_dir.glob("*/*/result.json"), key=lambda file: file.stat().st_mtime, reverse=True):
        try:
            quality = json.loads(result.read_text()).get("quality") or {}
        except (OSError, ValueError):
            continue
        if (quality.get("against_reference") or {}).get("reference") == key:
            return str(result), {text["id"]: text.get("prompt_ids") or [] for text in quality.get("texts") or []}
    return None


def check_tokenizer(path: Path, passed: Mapping[str, Any], results_dir: Path, key: str) -> str:
    """Refuse a pass whose prompt token ids differ from this model's passes here; the line saying what was checked."""
    local = local_prompts(results_dir, key)
    if local is None:
        return (f"tokenizer: not checked, this controller has no pass of {key} yet (its first bench compares the "
                "prompt token ids and refuses another tokenizer)")
    where, prompts = local
    checked = 0
    for text in passed["texts"]:
        if text["id"] in prompts:
            mismatch = tokenizer_mismatch(text["id"], prompts[text["id"]], text["prompt_ids"])
            if mismatch:
                raise RefusedImport(f"{path}: refused, the tokenizer differs from {key}'s on this controller "
                                    f"({where}): {mismatch.replace('the candidate', 'the imported pass')}")
            checked += 1
    return f"tokenizer: the same prompt token ids as {where} ({checked} texts)"


def import_reference(source: Path, results_dir: Path, key: str, checkpoint: str | None = None,
                     noise_from: Path | None = None, replace: bool = False, method: str | None = None,
                     dry: bool = False, now: datetime | None = None) -> tuple[Path, list[str]]:
    """Check ``source`` and write it as ``key``'s reference (unless ``dry``); (the reference's path, what was done).

    + source: a reference file or a bench result with a quality pass, from another run
    + results_dir: the controller's results folder
    + key: the model and revision it becomes the reference of (``key_of``)
    + checkpoint: what the source measured (default: the file's model and revision)
    + noise_from: the source's recipe measured in another engine start (its A/A noise)
    + replace: overwrite an existing reference (kept beside it as ``<key>.json.replaced-<time>``)
    + method: the profile's engine method, checked when given
    """
    passed, origin = read_source(source)
    texts = check_pass(source, passed, load_corpus(), method, origin["field"])
    lines = [f"{source}: a pass of corpus {passed['corpus']}, method {passed['method']}, texts {', '.join(texts)}"]
    lines.append(check_tokenizer(source, passed, results_dir, key))
    noise = origin["noise"]
    if noise_from is not None:
        again, again_origin = read_source(noise_from)
        check_pass(noise_from, again, load_corpus(), passed["method"], again_origin["field"])
        measured = compare_passes(passed, again)
        if measured.refused:
            raise RefusedImport(f"{noise_from}: refused as the A/A of {source}: {measured.refused}")
        noise = {**measured.as_dict(), "run": str(noise_from)}
    lines.append("A/A noise: " + (f"mean KLD {noise['mean_kld']:.4f}" if noise else "none (a pass is judged against "
                                  "the start recipe's gap in a tournament; --noise-from imports one)"))
    path = reference_path(results_dir, key)
    existing = load_reference(results_dir, key) if path.exists() else None
    if path.exists() and not replace:
        said = provenance(existing) if existing else "unreadable"
        raise RefusedImport(f"{path}: a reference of {key} exists ({said}); --replace overwrites it (the old file is "
                            "kept beside it)")
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%MZ")
    reference = {"model": key, "recipe": origin["recipe"], "run": origin["run"], "engine_start": origin["engine_start"],
                 "pass": dict(passed), "noise": noise,
                 "imported": {"from": str(source.resolve()), "at": stamp,
                              "sha256": hashlib.sha256(source.read_bytes()).hexdigest(),
                              "checkpoint": checkpoint or origin["checkpoint"],
                              "replaced": provenance(existing) if existing else None}}
    if dry:
        return path, [*lines, f"would write {path}: {provenance(reference)} (--dry: nothing written)"]
    if path.exists():
        kept = path.with_name(f"{path.name}.replaced-{stamp.replace(':', '')}")
        kept.write_bytes(path.read_bytes())
        lines.append(f"the old reference kept as {kept}")
    save_reference(results_dir, key, reference)
    return path, [*lines, f"wrote {path}: {provenance(reference)}"]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m rigforge.quality.reference_import",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("source", type=Path, help="a reference file or a result.json with a quality pass")
    parser.add_argument("--model", help="the model whose reference it becomes (repository or file name)")
    parser.add_argument("--revision", help="its revision (repository revision, or the first file's sha256[:12])")
    parser.add_argument("--profile", help="instead of --model/--revision: the profile whose reference recipe's model "
                                          "it becomes (its engine's method is checked too)")
    parser.add_argument("--checkpoint", help="what the source measured (default: the file's model and revision)")
    parser.add_argument("--noise-from", type=Path, help="the source's recipe in another engine start (its A/A)")
    parser.add_argument("--results", type=Path, help="results folder (default: $RIGFORGE_RESULTS_DIR or results)")
    parser.add_argument("--replace", action="store_true", help="overwrite an existing reference")
    parser.add_argument("--dry", action="store_true", help="check and say what would be written, write nothing")
    args = parser.parse_args(argv)
    if bool(args.profile) == bool(args.model or args.revision) or (args.model and not args.revision) or (
            args.revision and not args.model):
        parser.error("give --model and --revision, or --profile")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Import the reference; 2 with one message on stderr when the input is bad or refused."""
    from rigforge.profile.loader import ProfileError, load_profile
    from rigforge.quality.reference import model_key

    args = parse_args(argv)
    try:
        method = None
        if args.profile:
            profile = load_profile(args.profile)
            recipe = profile.bench.quality.reference_recipe or profile.engine.recipe
            key = model_key((profile.with_recipe(recipe) if recipe else profile).model)
            method = METHODS[profile.engine.kind]
        else:
            key = key_of(args.model, args.revision)
        _, lines = import_reference(args.source, args.results or results_root(), key, args.checkpoint,
                                    args.noise_from, args.replace, method, args.dry)
    except (RefusedImport, ProfileError) as error:
        print(f"reference import: {error}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
