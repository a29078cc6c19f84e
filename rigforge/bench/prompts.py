"""Prompts of a measured token length, each opened by a unique nonce.

The body is natural prose (random tokens would mislead speculative decoding) sized with the
server's tokenizer; one calibration request then reads ``usage.prompt_tokens`` to learn what
the server adds (BOS, chat template). The nonce comes first, so no two prompts share a prefix
and no prefix cache can serve any part of them.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass

from rigforge.bench.sanity import CheckResult, delivery_failure, prompt_tolerance
from rigforge.bench.stream import RequestRecord

SENTENCES = (
    "The harbor town woke slowly as fishing boats drifted back through the morning fog.",
    "Merchants unfolded their awnings and argued about the price of salt and rope.",
    "A young cartographer walked along the pier, sketching the outline of the coast in a worn notebook.",
    "She had spent three winters measuring rivers that no map had ever named.",
    "Her teacher once told her that every survey begins with a careful account of what is not yet known.",
    "In the square, children chased pigeons past a fountain carved with the faces of old kings.",
    "The baker handed out warm bread to the dock workers before the first bell rang.",
    "Clouds gathered over the western hills, promising rain before the evening tide.",
    "An old sailor described storms that had bent the masts of ships twice the size of his own.",
    "Nobody believed all of his stories, yet everyone stopped to listen when he began a new one.",
    "The library on the hill kept letters written by travelers who had crossed the northern desert.",
    "Some of those letters described cities built of white stone and gardens fed by hidden springs.",
    "Scholars disagreed about whether the cities had ever existed or were only a dream of tired walkers.",
    "The cartographer copied the descriptions and compared them with the distances she had measured.",
    "By late afternoon the rain arrived, tapping softly against the shutters of the reading room.",
    "She traced a faint route across the desert, connecting wells that appeared in five different letters.",
    "If the route was real, a caravan could cross the sand in eleven days instead of thirty.",
    "The idea kept her awake long after the lamps in the harbor had been put out.",
    "At dawn she went to the market to buy water skins, dried fruit and a sturdy pair of boots.",
    "A potter asked where she was going, and laughed kindly when she pointed toward the horizon.",
    "Two brothers who traded spices offered to guide her as far as the last green valley.",
    "They spoke of wind that sang through the rocks and of stars so bright they cast shadows.",
    "On the first night they camped beside a stream lined with tall reeds and quiet frogs.",
    "The older brother cooked lentils with cumin while the younger one repaired a torn saddle.",
    "They asked about her maps, and she explained how angles and patience turn land into lines.",
    "The valley ended abruptly at a ridge of red stone that glowed in the setting sun.",
    "Beyond it the desert stretched in long pale waves toward a sky without a single cloud.",
    "She thanked the brothers, checked her compass twice, and stepped onto the warm sand alone.",
    "Each day she walked until noon, rested in the shade of her cloak, and walked again at dusk.",
    "On the fourth day she found the first well, exactly where the oldest letter had placed it.",
    "Its stones were smooth from centuries of ropes, and the water tasted faintly of iron.",
    "She wrote the position carefully and drew a small circle on the map with a steady hand.",
    "The second and third wells followed, each a little farther apart than the letters suggested.",
    "On the ninth day a line of low white walls appeared, half buried and shimmering in the heat.",
    "Inside the walls she found terraces of dry soil where gardens must once have grown.",
    "A cracked basin still held the shape of a fountain, carved with patterns of leaves and birds.",
    "She sat on its rim and understood that the travelers had not been dreaming after all.",
    "When she returned to the harbor months later, the library gave her a room of her own.",
    "Her map of the desert route hung on its wall for many years, copied by every new student.",
    "And the old sailor, hearing the story, said he had known it all along.",
)


@dataclass(frozen=True)
class SizedBody:
    """The prompt body for one input length and how well it hit the target."""

    target_tokens: int
    body: str
    measured_prompt_tokens: int | None
    method: str
    failure: CheckResult | None = None


class NonceSource:
    """Thread-safe nonces unique to one run: the prompt's very first characters differ every time.

    Random digits come first, because a prefix cache reuses the longest shared *leading* run of
    tokens: a constant word or a zero-padded counter up front would be shared by every prompt.
    A fixed width keeps the token count about the same for every nonce.
    """

    def __init__(self, seed: int | None = None) -> None:
        self.run_id = random.Random(seed).getrandbits(64) if seed is not None else random.SystemRandom().getrandbits(64)
        self._counter = itertools.count()  # next() on a count is atomic under the GIL

    def next_prefix(self) -> str:
        """The opening of the next prompt."""
        return self.prefix(next(self._counter))

    def prefix(self, serial: int) -> str:
        """Prefix for a given serial: 12 digits that look random, then a full stop."""
        digest = hashlib.sha256(f"{self.run_id}:{serial}".encode()).hexdigest()
        return f"{int(digest[:16], 16) % 10**12:012d}. "


def filler_words(min_words: int, seed: int = 20261122) -> list[str]:
    """At least ``min_words`` words of prose, sentence order shuffled on every pass."""
    shuffler = random.Random(seed)
    words: list[str] = []
    while len(words) < min_words:
        sentences = list(SENTENCES)
        shuffler.shuffle(sentences)
        for sentence in sentences:
            words.extend(sentence.split())
    return words


def largest_fitting(words: list[str], prefix: str, target: int, count: Callable[[str], int | None]) -> int | None:
    """Largest k with count(prefix + first k words) <= target, by bisection; None without a tokenizer."""
    low, high = 0, len(words)
    if count(prefix) is None:
        return None
    while low < high:
        middle = (low + high + 1) // 2
        tokens = count(prefix + " ".join(words[:middle]))
        if tokens is None:
            return None
        if tokens <= target:
            low = middle
        else:
            high = middle - 1
    return low


def size_body(
    target: int,
    count: Callable[[str], int | None],
    calibrate: Callable[[str], RequestRecord],
    nonces: NonceSource,
) -> SizedBody:
    """Find a body whose full prompt is ``target`` tokens as the server counts them (usage.prompt_tokens).

    + count: the server's tokenizer (``/tokenize``), returning None when there is none
    + calibrate: sends one short request with a prompt and returns its record

    Without a tokenizer, the words-per-token ratio of calibration requests steers the size.
    """
    words = filler_words(target * 2 + 64)
    prefix = nonces.next_prefix()  # a sample for counting; every request, calibration too, gets its own

    def measure(kept: int) -> tuple[str, RequestRecord, CheckResult | None]:
        body = " ".join(words[:kept])
        record = calibrate(nonces.next_prefix() + body)
        return body, record, delivery_failure(record)

    kept = largest_fitting(words, prefix, target, count)
    if kept is not None:
        body, record, failure = measure(kept)
        if failure is None:
            # What the server adds to the text (BOS, chat template), learned once and removed.
            overhead = (record.prompt_tokens or 0) - (count(prefix + body) or 0)
            if overhead:
                body, record, failure = measure(largest_fitting(words, prefix, target - overhead, count) or 1)
        return SizedBody(target, body, record.prompt_tokens, "tokenize", failure)

    kept = max(1, int(target * 0.7))
    for _attempt in range(6):
        body, record, failure = measure(kept)
        if failure is not None or record.prompt_tokens is None:
            return SizedBody(target, body, None, "usage_probe", failure)
        if abs(record.prompt_tokens - target) <= prompt_tolerance(target) // 2:
            break
        kept = max(1, round(kept * target / max(record.prompt_tokens, 1)))
    return SizedBody(target, body, record.prompt_tokens, "usage_probe")
