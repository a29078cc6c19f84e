"""Tiny GGUF models written at test time, so failure paths run on a real engine without downloads.

All models share one SentencePiece-style ("llama") vocabulary: <unk>/<s>/</s>, the 256 byte
tokens, and word pieces with every prefix of each word (llama.cpp's SPM tokenizer merges
pairs only through pieces that exist, so without the prefixes words would stay letters).

- ``write_random_gguf``: random weights; decodes byte tokens that do not form valid UTF-8,
  i.e. the "garbage" failure.
- ``write_oracle_gguf``: one-hot embeddings, zero attention/FFN and ``output[succ[i], i]``
  set, so greedy decoding follows a successor table exactly. Used for a one-token loop
  (the "repetition" failure) and for a healthy-looking cycle that contains multi-byte UTF-8
  characters spelled with byte tokens, where the server streams several tokens in one chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

SPACE = "\u2581"  # SentencePiece's word-boundary marker
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
ORACLE_WIDTH = 512  # one-hot embeddings need n_embd >= vocabulary size
PROBE_PIECES = (":", "=", f"{SPACE}=", f"{SPACE}4", f"{SPACE}Paris")
CYCLE_WORDS = ("amber", "river", "stone", "cloud", "maple", "frost", "lumen", "harbor", "quartz", "meadow")
# Two- and three-byte UTF-8 characters whose bytes never repeat, so each byte token has one successor.
MULTIBYTE_CHARS = ("\u20ac", "\u00f1", "\u65e5", "\u03a9", "\u0416")


@dataclass(frozen=True)
class Vocabulary:
    """Token strings with their SPM scores and types, ids are list positions."""

    tokens: list[str]
    scores: list[float]
    types: list[int]

    def id_of(self, piece: str) -> int:
        """Id of a piece that must exist."""
        return self.tokens.index(piece)

    def byte_id(self, value: int) -> int:
        """Id of the byte-fallback token for one byte value."""
        return self.id_of(f"<0x{value:02X}>")


def build_vocabulary(words: tuple[str, ...] = CYCLE_WORDS + ("very", "Paris")) -> Vocabulary:
    """The shared vocabulary: specials, bytes, single letters, probe pieces and word prefixes."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{value:02X}>" for value in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    pieces: list[str] = []
    letters = [chr(code) for code in range(ord("a"), ord("z") + 1)]
    letters += [chr(code) for code in range(ord("A"), ord("Z") + 1)]
    for letter in letters:
        pieces += [letter, SPACE + letter]
    pieces += list(PROBE_PIECES) + [".", ",", "?", "4", "2", f"{SPACE}2", f"{SPACE}+"]
    for word in words:
        marked = SPACE + word
        pieces += [marked[:end] for end in range(3, len(marked) + 1)]
    unique_pieces = list(dict.fromkeys(pieces))
    tokens += unique_pieces
    types += [gguf.TokenType.NORMAL] * len(unique_pieces)
    # Longer pieces score higher so the SPM merge prefers whole words.
    scores = [0.0] * (3 + 256) + [float(len(piece)) for piece in unique_pieces]
    return Vocabulary(tokens=tokens, scores=scores, types=[int(kind) for kind in types])


def _write_llama_gguf(path: Path, vocab: Vocabulary, width: int, tensors: dict[str, np.ndarray]) -> Path:
    """Write a 2-block llama-architecture GGUF with the given float32 tensors."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(8192)
    writer.add_embedding_length(width)
    writer.add_block_count(2)
    writer.add_feed_forward_length(2 * width)
    writer.add_head_count(8)
    writer.add_head_count_kv(8)
    writer.add_rope_dimension_count(width // 8)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(vocab.tokens))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(vocab.tokens)
    writer.add_token_scores(vocab.scores)
    writer.add_token_types(vocab.types)
    writer.add_unk_token_id(UNK_ID)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_add_bos_token(True)
    for name, array in tensors.items():
        writer.add_tensor(name, array.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _block_tensors(width: int, fill: float | None, rng: np.random.Generator | None) -> dict[str, np.ndarray]:
    """Per-block tensors (numpy shapes are (out, in)): random when rng is given, else constant ``fill``."""

    def make(shape: tuple[int, ...]) -> np.ndarray:
        if rng is not None:
            return rng.normal(0.0, 0.5, size=shape)
        return np.full(shape, fill, dtype=np.float32)

    tensors: dict[str, np.ndarray] = {}
    for block in range(2):
        prefix = f"blk.{block}"
        tensors[f"{prefix}.attn_norm.weight"] = np.ones(width)
        tensors[f"{prefix}.ffn_norm.weight"] = np.ones(width)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensors[f"{prefix}.{name}.weight"] = make((width, width))
        tensors[f"{prefix}.ffn_gate.weight"] = make((2 * width, width))
        tensors[f"{prefix}.ffn_up.weight"] = make((2 * width, width))
        tensors[f"{prefix}.ffn_down.weight"] = make((width, 2 * width))
    return tensors


def write_random_gguf(path: Path, seed: int = 7, width: int = 64) -> Path:
    """A model with random weights: its greedy output is mostly stray byte tokens (garbage)."""
    vocab = build_vocabulary()
    rng = np.random.default_rng(seed)
    tensors = {
        "token_embd.weight": rng.normal(0.0, 1.0, size=(len(vocab.tokens), width)),
        "output_norm.weight": np.ones(width),
        "output.weight": rng.normal(0.0, 1.0, size=(len(vocab.tokens), width)),
    }
    tensors.update(_block_tensors(width, None, rng))
    return _write_llama_gguf(path, vocab, width, tensors)


def write_oracle_gguf(path: Path, successors: dict[int, int], default_successor: int, vocab: Vocabulary) -> Path:
    """A model whose greedy next token after token i is ``successors.get(i, default_successor)``."""
    size = len(vocab.tokens)
    if size > ORACLE_WIDTH:
        raise ValueError(f"vocabulary of {size} does not fit one-hot width {ORACLE_WIDTH}")
    embedding = np.zeros((size, ORACLE_WIDTH), dtype=np.float32)
    embedding[np.arange(size), np.arange(size)] = 1.0
    output = np.zeros((size, ORACLE_WIDTH), dtype=np.float32)
    for token in range(size):
        output[successors.get(token, default_successor), token] = 30.0
    tensors = {"token_embd.weight": embedding, "output_norm.weight": np.ones(ORACLE_WIDTH), "output.weight": output}
    tensors.update(_block_tensors(ORACLE_WIDTH, 0.0, None))
    return _write_llama_gguf(path, vocab, ORACLE_WIDTH, tensors)


def probe_successors(vocab: Vocabulary) -> dict[int, int]:
    """Successors that make the fixed-answer probes pass: '...A:' -> ' Paris', '2 + 2 =' -> ' 4'."""
    paris, four = vocab.id_of(f"{SPACE}Paris"), vocab.id_of(f"{SPACE}4")
    return {vocab.id_of(":"): paris, paris: EOS_ID, vocab.id_of(f"{SPACE}="): four, four: EOS_ID}


def write_loop_gguf(path: Path) -> Path:
    """Answers the probes, then repeats ' very' forever: only the repetition check can catch it."""
    vocab = build_vocabulary()
    very = vocab.id_of(f"{SPACE}very")
    successors = probe_successors(vocab)
    successors[very] = very
    return write_oracle_gguf(path, successors, very, vocab)


def multibyte_cycle(vocab: Vocabulary) -> list[int]:
    """A long cycle of words, each followed by a multi-byte character spelled in byte tokens."""
    cycle: list[int] = []
    for index, word in enumerate(CYCLE_WORDS):
        cycle.append(vocab.id_of(SPACE + word))
        if index < len(MULTIBYTE_CHARS):
            cycle += [vocab.byte_id(byte) for byte in MULTIBYTE_CHARS[index].encode("utf-8")]
    return cycle


def write_multibyte_gguf(path: Path) -> Path:
    """Answers the probes, then cycles through words and multi-byte characters (valid UTF-8).

    The server holds back byte tokens until they decode as UTF-8, so a 3-byte character is 3
    tokens but one streamed chunk: the real-stream case where chunk count != token count.
    """
    vocab = build_vocabulary()
    cycle = multibyte_cycle(vocab)
    successors = probe_successors(vocab)
    for position, token in enumerate(cycle):
        successors[token] = cycle[(position + 1) % len(cycle)]
    return write_oracle_gguf(path, successors, cycle[0], vocab)


def tokens_per_cycle() -> int:
    """Token length of the multibyte model's cycle (its output repeats after this many tokens)."""
    return len(multibyte_cycle(build_vocabulary()))
