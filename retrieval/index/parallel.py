"""Term ids of texts in worker processes, for `build_index(..., workers=N)`.

Each worker keeps a builder of its own (InvertedIndexBuilder, never written):
its token tables (index/ascii_tokens.py) and vocabulary, so a text is
tokenized and looked up in the compiled pass of the one-process build, and a
token is analysed once per worker that meets it. For a batch of texts a
worker sends back the term ids of their tokens in its own numbering, each
text's number of tokens, and the terms it numbered since its last batch. The
parent maps a worker's numbering to the shared vocabulary (one array per
worker, grown by the new terms) and adds the ids: the same index as one
process builds, as the arrays do not depend on how terms are numbered while
adding (write sorts the vocabulary).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

import numpy as np

from retrieval.analysis import Analyzer, ignore_interrupts, in_processes
from retrieval.index.postings import InvertedIndexBuilder, NewTerms

AHEAD = 16  # batches in flight: the reading can run ahead while a worker meets many new tokens
_worker: tuple[InvertedIndexBuilder, NewTerms, Analyzer] | None = None


def _init(settings: dict) -> None:
    global _worker
    ignore_interrupts()
    analyzer = Analyzer.from_settings(settings)
    vocabulary = NewTerms()
    _worker = (InvertedIndexBuilder(term_of=analyzer.analyse_token, terms_of=analyzer.analyse_tokens,
                                    vocabulary=vocabulary), vocabulary, analyzer)


def _term_ids(texts: list[str]) -> tuple[int, int, list[str], bytes, bytes]:
    """(this worker's pid, the id of its first new term, its new terms, term ids, tokens per text)."""
    assert _worker is not None
    builder, vocabulary, analyzer = _worker
    start = len(vocabulary.order)
    builder.add_texts(texts, tokens=analyzer.tokens)
    ids, counts = builder.take()
    return os.getpid(), start, vocabulary.order[start:], ids, counts


class _Numbering:
    """A worker's term ids -> the builder's: `ids[local]`, -1 staying -1 (the last element, which the
    terms never reach: the array grows by doubling)."""

    def __init__(self) -> None:
        self.ids = np.full(1024, -1, np.int32)
        self.size = 0

    def extend(self, ids: list[int]) -> None:
        if self.size + len(ids) >= len(self.ids):
            grown = np.full(max(2 * len(self.ids), self.size + len(ids) + 1), -1, np.int32)
            grown[:self.size] = self.ids[:self.size]
            self.ids = grown
        self.ids[self.size:self.size + len(ids)] = ids
        self.size += len(ids)


def add_in_workers(builder: InvertedIndexBuilder, batches: Iterable[tuple[object, list[str]]],
                   analyzer: Analyzer, workers: int) -> Iterator[object]:
    """Add the texts of each (key, texts) of `batches` to `builder` in order, tokenized and analysed in
    `workers` processes; yields each key once its texts are added."""
    numberings: dict[int, _Numbering] = {}
    vocabulary = builder.vocab
    for key, (pid, start, new, ids, counts) in in_processes(batches, _term_ids, _init,
                                                             (analyzer.settings,), workers, AHEAD):
        numbering = numberings.setdefault(pid, _Numbering())
        if start != numbering.size:  # a worker takes its batches in order, as they are added
            raise AssertionError(f"worker {pid} sent terms from {start}, expected {numbering.size}")
        if new:
            numbering.extend([vocabulary[term] for term in new])
        builder.add_ids(numbering.ids[np.frombuffer(ids, np.int32)], np.frombuffer(counts, np.int32))
        yield key
