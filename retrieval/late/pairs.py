"""Unsupervised training pairs from corpus text alone: Inverse Cloze Task and title -> body.

ICT (Lee et al. 2019, the pre-training signal of ORQA and REALM): a span of a
document is the pseudo-query and the rest of the document is its positive.
Title pairs: a document's own title is the pseudo-query and its body the
positive (only where the collection gives titles a field of their own).
Spans here are runs of words rather than sentences, because some corpora
(Vaswani) have no punctuation. A span must be mostly alphabetic words (CACM
records end in citation numbers and dates) with a few content words (5+
letters), and what remains must still be a passage. Only document text is
read: never a collection's queries or qrels.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

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


def title_pair(title: str, text: str) -> tuple[str, str] | None:
    """(title, body) for a document with a title and a body of MIN_REST+ words, else None; a body
    that opens with its own title (Cranfield's repeats it) has it cut, so the pair is no copy."""
    title, body = title.strip(), text.strip()
    if body.lower().startswith(title.lower()):
        body = body[len(title):].strip()
    return (title, body) if title and len(body.split()) >= MIN_REST else None


def corpus_pairs(texts: Iterable[str], limit: int, seed: int) -> list[tuple[str, str]]:
    """Up to `limit` ICT (pseudo-query, positive) pairs from documents picked in a seeded order."""
    return _seeded_pairs(list(texts), ict_pair, limit, seed)


def title_pairs(docs: Iterable[tuple[str, str]], limit: int, seed: int) -> list[tuple[str, str]]:
    """Up to `limit` (title, body) pairs from (title, text) documents picked in a seeded order."""
    return _seeded_pairs(list(docs), lambda doc, _: title_pair(*doc), limit, seed)


def _seeded_pairs(items: list, make: Callable[[object, random.Random], tuple[str, str] | None],
                  limit: int, seed: int) -> list[tuple[str, str]]:
    """`make`'s pairs from `items` in a seeded order, skipping its Nones, until `limit`."""
    rng = random.Random(seed)
    order = list(range(len(items)))
    rng.shuffle(order)
    pairs = []
    for i in order:
        pair = make(items[i], rng)
        if pair is not None:
            pairs.append(pair)
            if len(pairs) >= limit:
                break
    return pairs
