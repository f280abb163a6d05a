"""Unsupervised training pairs from corpus text alone (Inverse Cloze Task).

ICT (Lee et al. 2019, the pre-training signal of ORQA and REALM): a span of a
document is the pseudo-query and the rest of the document is its positive.
Spans here are runs of words rather than sentences, because some corpora
(Vaswani) have no punctuation. A span must be mostly alphabetic words (CACM
records end in citation numbers and dates) with a few content words (5+
letters), and what remains must still be a passage. Only document text is
read: never a collection's queries or qrels.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

MIN_SPAN, MAX_SPAN = 4, 12  # words in a pseudo-query
MIN_REST = 20  # words left in the positive
MIN_ALPHA = 0.8  # share of alphabetic words in a span
MIN_CONTENT = 3  # words of 5+ letters in a span (few stopwords)
TRIES = 8  # span positions tried per document


def _alphabetic(word: str) -> bool:
    return any(c.isalpha() for c in word) and sum(c.isalpha() for c in word) >= 0.6 * len(word)


def ict_pair(text: str, rng: random.Random) -> tuple[str, str] | None:
    """(span, rest of the text) for one document, or None when it is too short or has no clean span."""
    words = text.split()
    longest = min(MAX_SPAN, len(words) - MIN_REST)
    if longest < MIN_SPAN:
        return None
    for _ in range(TRIES):
        length = rng.randint(MIN_SPAN, longest)
        start = rng.randrange(len(words) - length + 1)
        span = words[start:start + length]
        content = sum(sum(c.isalpha() for c in w) >= 5 for w in span)
        if sum(map(_alphabetic, span)) >= MIN_ALPHA * length and content >= MIN_CONTENT:
            rest = words[:start] + words[start + length:]
            return " ".join(span), " ".join(rest)
    return None


def corpus_pairs(texts: Iterable[str], limit: int, seed: int) -> list[tuple[str, str]]:
    """Up to `limit` ICT (pseudo-query, positive) pairs from documents picked in a seeded order."""
    texts = list(texts)
    rng = random.Random(seed)
    order = list(range(len(texts)))
    rng.shuffle(order)
    pairs = []
    for i in order:
        pair = ict_pair(texts[i], rng)
        if pair is not None:
            pairs.append(pair)
            if len(pairs) >= limit:
                break
    return pairs
