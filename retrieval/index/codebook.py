"""Per-posting impacts as a codebook: exact, and 2 bytes a posting instead of 8.

A term's impacts take few distinct values: every model here computes a
posting's impact from the term, its frequency in the document and the
document's quantised length (256 values, as Lucene stores norms), so even a
term in millions of documents has a few hundred. Each term's distinct float64
impacts go into one table, term after term (term t's run starts at
`bases[t]`), and each posting keeps the position of its impact in its term's
run: uint16, or uint32 for an index where some term has more than 65,536
distinct impacts. The table holds the float64 values themselves, so every
score is bit for bit the one a float64 impact per posting gives, while a query
reads 6 bytes a posting (docno and code) instead of 12.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
from numba import njit

from retrieval.errors import InputError
from retrieval.index.blocks import CodeBlocks, blocks_of, term_codes, unpack_codes, verify_codes
from retrieval.index.postings import term_ranges

CODE_TYPES = (np.uint16, np.uint32)  # tried in this order: the narrowest that holds every term's run
CHECK_POSTINGS = 1 << 24  # codes checked this many at a time (bounded resident memory)


@dataclass(frozen=True)
class Impacts:
    """Posting p of term t has impact table[bases[t] + codes[p]]."""

    codes: np.ndarray  # uint16 or uint32, one per posting
    table: np.ndarray  # float64: each term's distinct impacts, ascending by bit pattern
    bases: np.ndarray  # int64, terms + 1: where each term's run of the table starts

    def values(self, term: int, start: int, stop: int) -> np.ndarray:
        """The float64 impacts of postings [start, stop) of `term`."""
        return self.table[int(self.bases[term]) + self.codes[start:stop].astype(np.int64)]

    def maxima(self) -> np.ndarray:
        """The largest impact of each term (0 for a term without postings)."""
        out = np.zeros(len(self.bases) - 1)
        has = np.flatnonzero(np.diff(self.bases) > 0)
        if len(has):
            out[has] = np.maximum.reduceat(self.table, self.bases[has])
        return out

    def minimum(self) -> float | None:
        """The smallest impact of any posting (None for an empty index)."""
        return float(np.min(self.table)) if len(self.table) else None

    def check(self, indptr: np.ndarray, path: Path, release: Callable[[], None] = lambda: None) -> None:
        """Raise InputError (naming `path`) unless every code points into its own term's run (the
        kernels read the table unchecked); codes are checked a range of terms at a time, `release`
        after each."""
        sizes = np.diff(self.bases)
        if (self.bases.dtype != np.int64 or self.table.dtype != np.float64 or len(self.bases) != len(indptr)
                or self.codes.dtype not in CODE_TYPES or len(self.codes) != int(indptr[-1])
                or self.bases[0] != 0 or self.bases[-1] != len(self.table) or np.any(sizes < 0)):
            raise InputError("stored impacts do not match the postings; rebuild the index", path)
        for lo, hi in term_ranges(indptr, CHECK_POSTINGS):
            if not _codes_fit(indptr, self.codes, sizes, lo, hi):
                raise InputError("stored impacts do not match the postings; rebuild the index", path)
            release()


class PackedImpacts:
    """Impacts whose codes are packed in blocks beside the postings' (blocks.CodeBlocks), as a packed
    index stores its BM25 impacts: the compiled searcher reads the blocks; `codes` (every posting's,
    flat) is decoded into memory only if asked for."""

    def __init__(self, packed: CodeBlocks, table: np.ndarray, bases: np.ndarray, indptr: np.ndarray):
        self.packed, self.table, self.bases, self.indptr = packed, table, bases, np.asarray(indptr)

    @cached_property
    def codes(self) -> np.ndarray:
        return unpack_codes(self.indptr, self.packed)

    def values(self, term: int, start: int, stop: int) -> np.ndarray:
        """The float64 impacts of postings [start, stop) of `term` (decoding only its blocks)."""
        first = int(self.indptr[term])
        codes = term_codes(self.indptr, blocks_of(self.indptr), self.packed, term)[start - first:stop - first]
        return self.table[int(self.bases[term]) + codes]

    maxima = Impacts.maxima
    minimum = Impacts.minimum

    def check(self, indptr: np.ndarray, path: Path) -> None:
        """InputError (naming `path`) unless the table fits the postings and every code points into its
        own term's run, each block's recorded largest code being its largest."""
        sizes = np.diff(self.bases)
        if (self.bases.dtype != np.int64 or self.table.dtype != np.float64 or len(self.bases) != len(indptr)
                or self.bases[0] != 0 or self.bases[-1] != len(self.table) or np.any(sizes < 0)):
            raise InputError("stored impacts do not match the postings; rebuild the index", path)
        verify_codes(indptr, self.packed, self.bases, path.parent)


def encode(indptr: np.ndarray, chunks: Callable[[], Iterable[tuple[int, int, np.ndarray]]],
           codes_for: Callable[[type], np.ndarray]) -> Impacts:
    """The codebook of impacts given term range by term range: each pass of `chunks()` yields (lo,
    hi, float64 impacts of the postings of terms [lo, hi)); `codes_for(dtype)` gives the array (in
    memory or a file map) that receives the codes. Tries uint16 first and makes a second pass with
    uint32 if a term has more distinct impacts than uint16 can number."""
    for dtype in CODE_TYPES:
        codes = codes_for(dtype)
        impacts = _encode_with(indptr, chunks(), codes, int(np.iinfo(dtype).max) + 1)
        if impacts is not None:
            return impacts
    raise AssertionError("uint32 codes number any term's postings")


def _encode_with(indptr: np.ndarray, chunks: Iterable[tuple[int, int, np.ndarray]], codes: np.ndarray,
                 limit: int) -> Impacts | None:
    bases = np.zeros(len(indptr), np.int64)
    tables: list[np.ndarray] = []
    filled = 0
    for lo, hi, values in chunks:
        start, stop = int(indptr[lo]), int(indptr[hi])
        bits = np.ascontiguousarray(values, dtype=np.float64).view(np.int64)
        table = np.empty(stop - start, np.int64)
        sizes = np.zeros(hi - lo, np.int64)
        used = _encode_terms(indptr, bits, lo, hi, limit, codes[start:stop], table, sizes)
        if used < 0:
            return None
        bases[lo + 1:hi + 1] = filled + np.cumsum(sizes)
        tables.append(table[:used].copy())
        filled += used
    table = np.concatenate(tables).view(np.float64) if tables else np.zeros(0)
    return Impacts(codes, table, bases)


def from_values(indptr: np.ndarray, values: np.ndarray) -> Impacts:
    """The codebook of one float64 impact per posting (in memory)."""
    terms = len(indptr) - 1
    return encode(indptr, lambda: [(0, terms, values)] if terms else [],
                  lambda dtype: np.empty(len(values), dtype))


@njit(cache=True)
def _encode_terms(indptr, bits, lo, hi, limit, codes, table, sizes):
    """Codes of the postings of terms [lo, hi) (`bits`: their impacts' bit patterns, from posting
    indptr[lo]) into `codes`, each term's distinct values appended to `table` in ascending order,
    their count to `sizes`; returns the table entries used, or -1 if a term has more than `limit`
    distinct values. One pass a term through an open-addressing hash of bit patterns, then a sort
    of the few distinct values (a sort of every posting was most of the encoding time)."""
    start = indptr[lo]
    most = 1  # the most distinct values a term here can have
    for t in range(lo, hi):
        most = max(most, min(indptr[t + 1] - indptr[t], limit + 1))
    slot_of = np.full(_hash_size(most)[0], -1, np.int64)  # hash slot -> local id (first-seen order)
    keys = np.empty(most, np.int64)  # local id -> bit pattern
    where = np.empty(most, np.int64)  # local id -> its slot, to clear it for the next term
    rank = np.empty(most, np.int64)  # local id -> position in the ascending run
    used = 0
    for t in range(lo, hi):
        s, e = indptr[t] - start, indptr[t + 1] - start
        if e == s:
            continue
        size, log2 = _hash_size(min(e - s, limit + 1))
        shift, mask = np.uint64(64 - log2), size - 1
        distinct = 0
        for p in range(s, e):
            key = bits[p]
            slot = np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> shift)
            while slot_of[slot] >= 0 and keys[slot_of[slot]] != key:
                slot = (slot + 1) & mask
            if slot_of[slot] < 0:
                if distinct == limit:
                    return -1
                slot_of[slot], keys[distinct], where[distinct] = distinct, key, slot
                distinct += 1
            codes[p] = slot_of[slot]
        order = np.argsort(keys[:distinct])
        for i in range(distinct):
            rank[order[i]] = i
            table[used + i] = keys[order[i]]
            slot_of[where[i]] = -1
        for p in range(s, e):
            codes[p] = rank[codes[p]]
        sizes[t - lo] = distinct
        used += distinct
    return used


@njit(cache=True, inline="always")
def _hash_size(values):
    """(size, log2 size): a power of two at least twice `values` (at most half full: short probes)."""
    size, log2 = 8, 3
    while size < 2 * values:
        size, log2 = 2 * size, log2 + 1
    return size, log2


@njit(cache=True)
def _codes_fit(indptr, codes, sizes, lo, hi):
    """Whether every code of terms [lo, hi) is below its term's run length."""
    for t in range(lo, hi):
        size = sizes[t]
        for p in range(indptr[t], indptr[t + 1]):
            if codes[p] >= size:
                return False
    return True
