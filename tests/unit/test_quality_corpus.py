"""The quality corpus: public domain, its source said per text, built reproducibly from pinned packages, and a
profile's ``bench.quality.texts`` reading its first texts (validated against the corpus's size)."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from rigforge.profile.loader import load_profile
from rigforge.profile.quality import Quality, corpus_size
from rigforge.quality.reference import CORPUS_PATH, load_corpus, quality_config

REPO_ROOT = Path(__file__).resolve().parents[2]


def builder():
    """measurements/quality_corpus.py as a module (it is a script, not a package member)."""
    spec = importlib.util.spec_from_file_location("quality_corpus", REPO_ROOT / "measurements" / "quality_corpus.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_text_says_its_source_and_is_public_domain() -> None:
    corpus = load_corpus()
    assert corpus["corpus"] == builder().VERSION and "public domain" in corpus["licence"]
    ids = [text["id"] for text in corpus["texts"]]
    assert len(set(ids)) == len(ids) >= 12
    for text in corpus["texts"]:
        assert "public domain" in corpus["sources"][text["source"]]["licence"], text["id"]
        # a few hundred tokens each: long enough for context, short enough for a CPU sandbox's prompt
        assert 100 <= len(text["text"].split()) <= 320, text["id"]
    assert len({text["source"] for text in corpus["texts"]}) >= 4  # varied kinds, not one famous book


def test_the_first_four_texts_are_one_of_each_kind() -> None:
    """A profile reading 4 texts (the sandbox's) still reads every kind of prose."""
    assert len({text["source"] for text in load_corpus()["texts"][:4]}) == 4


def test_the_builder_lists_the_shipped_texts_in_order() -> None:
    """The shipped file is the builder's output (``--check`` compares it whole, with the packages)."""
    built = builder()
    assert [text["id"] for text in load_corpus()["texts"]] == [text_id for text_id, _, _ in built.TEXTS]
    assert set(built.SOURCES) == set(load_corpus()["sources"])


def test_the_dictionary_reader_decodes_dictd_offsets(tmp_path: Path) -> None:
    built = builder()
    body = "cosmic rays\n n.\n\n    Notionally, the cause of {bit rot}.\n"
    other = "zzz\n n.\n\n    x\n"
    data = (other + body).encode()
    (tmp_path / "usr/share/dictd").mkdir(parents=True)
    (tmp_path / "usr/share/dictd/jargon.dict.dz").write_bytes(gzip.compress(data))
    b64 = built.B64
    start, size = len(other.encode()), len(body.encode())
    encode = lambda n: b64[n // 64] + b64[n % 64] if n >= 64 else b64[n]  # noqa: E731
    (tmp_path / "usr/share/dictd/jargon.index").write_text(
        f"zzz\tA\t{encode(len(other))}\ncosmic rays\t{encode(start)}\t{encode(size)}\n")
    assert built.dictionary_entry(tmp_path, "jargon", "cosmic rays") == "Notionally, the cause of bit rot."


def test_the_sandbox_reads_its_first_four_texts_and_the_gpu_profiles_all() -> None:
    corpus = load_corpus()
    for name in ("sandbox", "sandbox-instruct"):
        block = quality_config(load_profile(name).bench.quality, "llama.cpp", None)
        assert block and [text["id"] for text in block["texts"]] == [t["id"] for t in corpus["texts"][:4]]
    for name in ("2x-pix", "4x-threadripper", "8x-turin"):
        quality = load_profile(name).bench.quality
        assert quality.texts is None
        block = quality_config(quality, "vllm", None)
        assert block and len(block["texts"]) == len(corpus["texts"]) == corpus_size()


def test_more_texts_than_the_corpus_has_is_refused_with_the_limit() -> None:
    fields = load_profile("sandbox").bench.quality.model_dump()
    assert Quality.model_validate({**fields, "texts": corpus_size()}).texts == corpus_size()
    with pytest.raises(ValidationError, match=f"has {corpus_size()} texts, so at most {corpus_size()}"):
        Quality.model_validate({**fields, "texts": corpus_size() + 1})
    with pytest.raises(ValidationError):
        Quality.model_validate({**fields, "texts": 0})


def test_the_profile_reads_the_same_corpus_file_as_the_quality_pass() -> None:
    assert corpus_size() == len(json.loads(CORPUS_PATH.read_text())["texts"])


def test_a_pass_of_the_first_corpus_is_refused_by_the_shipped_one(tmp_path: Path) -> None:
    """A reference recorded on kjv-v1 is not silently compared with passes of the new texts."""
    from rigforge.quality.reference_import import RefusedImport, check_pass

    old = json.loads((REPO_ROOT / "tests/fixtures/quality/llamacpp_pass_default.json").read_text())
    with pytest.raises(RefusedImport, match="'kjv-v1': another corpus version"):
        check_pass(tmp_path / "old.json", old, load_corpus(), "greedy", "quality")


def test_the_measurement_script_reads_the_profile_with_its_overrides() -> None:
    """measurements/quality_kld.py measures the profile's pass, cut as asked, without the task score."""
    spec = importlib.util.spec_from_file_location("quality_kld", REPO_ROOT / "measurements" / "quality_kld.py")
    assert spec and spec.loader
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    args = script.argparse.Namespace(profile="sandbox-instruct", texts=16, max_tokens=16)
    quality = script.settings(args)
    assert (quality.texts, quality.max_tokens, quality.task_score.enabled) == (16, 16, False)
    kept = script.settings(script.argparse.Namespace(profile="sandbox", texts=None, max_tokens=None))
    assert kept.texts == load_profile("sandbox").bench.quality.texts == 4
    assert script.rows("q4_1")["kv-q4"][-3:] == ("q4_1", "--flash-attn", "on")
