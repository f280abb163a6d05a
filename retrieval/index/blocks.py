"""Compact postings: blocks of BLOCK postings, docnos delta-coded, every stream bit-packed (numba).

Each term's postings are cut into blocks of BLOCK (the last one shorter). A
block stores, in one run of little-endian uint32 words:

  docno gaps   docno - previous docno - 1 (the previous one is the last docno
               of the term's block before, or -1 for its first block), in the
               block's own width of bits (0 to 32: the fewest that hold its
               largest gap);
  frequencies  tf - 1, in the block's own width.

Widths of 8, 16 and 32 bits decode with a plain load per value (a loop the
compiler vectorises); others with a shift and mask each, from the 64 bits of
a value's word and the next, so every stream ends with a spare word.

Beside the words, per block: `lasts` (int32, its last docno: a cursor skips a
block without decoding it), `offsets` (int64, blocks + 1: where its words
start; not stored, as they follow from the widths and block sizes) and
`widths` (uint8, (blocks, 2): the two bit widths). A term's blocks are
[term_blocks[t], term_blocks[t + 1]), term_blocks being the running sum of
ceil(df / BLOCK) over the vocabulary.

Impact codes (codebook.py) are packed the same way in a stream of their own
(`CodeBlocks`, aligned block for block with the postings), with the largest
code of each block: codes number each term's distinct impacts in ascending
order, so table[bases[t] + block_max_code] is the block's largest impact,
the bound block-max pruning skips with.

Packing is lossless: decoding gives back the same docnos, frequencies and
codes, so scores are bit for bit those of the flat arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit

from retrieval.errors import InputError
from retrieval.storage import load_array, save_array

BLOCK = 128
POSTING_FILES = ("block_words.npy", "block_lasts.npy", "block_widths.npy")  # offsets follow from widths
CODE_FILES = ("code_words.npy", "code_widths.npy", "code_maxima.npy")


def blocks_of(indptr: np.ndarray) -> np.ndarray:
    """term_blocks: term t's blocks are [term_blocks[t], term_blocks[t + 1])."""
    out = np.zeros(len(indptr), dtype=np.int64)
    np.cumsum((np.diff(np.asarray(indptr)) + BLOCK - 1) // BLOCK, out=out[1:])
    return out


@dataclass(frozen=True)
class Blocks:
    """Packed postings (docnos and frequencies) of an inverted index; `words` ends with a spare word
    (the decoder reads a word past each value)."""

    indptr: np.ndarray  # int64, terms + 1: posting offsets (df = diff)
    term_blocks: np.ndarray  # int64, terms + 1
    words: np.ndarray  # uint32
    lasts: np.ndarray  # int32, one per block
    offsets: np.ndarray  # int64, blocks + 1
    widths: np.ndarray  # uint8, (blocks, 2)

    def save(self, path: Path) -> None:
        for name, array in zip(POSTING_FILES, (self.words, self.lasts, self.widths)):
            save_array(path / name, array)

    @classmethod
    def load(cls, path: Path, indptr: np.ndarray) -> Blocks:
        """The stored blocks; InputError unless the arrays fit together (the decoder reads them
        unchecked)."""
        words, lasts, widths = (np.asarray(load_array(path / name)) for name in POSTING_FILES)
        term_blocks = blocks_of(indptr)
        n = int(term_blocks[-1])
        ok = (
            words.dtype == np.uint32
            and lasts.dtype == np.int32
            and widths.dtype == np.uint8
            and words.ndim == 1
            and lasts.shape == (n,)
            and widths.shape == (n, 2)
            and (n == 0 or int(widths.max()) <= 32)
        )
        offsets = np.zeros(n + 1, np.int64)
        if ok and n:
            sizes = _block_sizes(indptr, term_blocks)
            np.cumsum(
                (sizes * widths[:, 0].astype(np.int64) + 31) // 32
                + (sizes * widths[:, 1].astype(np.int64) + 31) // 32,
                out=offsets[1:],
            )
        if not (ok and len(words) == int(offsets[-1]) + 1):
            raise InputError(
                "inconsistent index array: the packed postings do not fit their blocks; rebuild the index",
                path / POSTING_FILES[0],
            )
        return cls(indptr, term_blocks, words, lasts, offsets, widths)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.words, self.lasts, self.offsets, self.widths))


@dataclass(frozen=True)
class CodeBlocks:
    """Packed impact codes, block for block with the postings, and each block's largest code."""

    words: np.ndarray  # uint32
    offsets: np.ndarray  # int64, blocks + 1
    widths: np.ndarray  # uint8, one per block
    maxima: np.ndarray  # uint32, the largest code of each block

    def save(self, path: Path) -> None:
        for name, array in zip(CODE_FILES, (self.words, self.widths, self.maxima)):
            save_array(path / name, array)

    @classmethod
    def load(cls, path: Path, indptr: np.ndarray, term_blocks: np.ndarray) -> CodeBlocks:
        words, widths, maxima = (np.asarray(load_array(path / name)) for name in CODE_FILES)
        n = int(term_blocks[-1])
        ok = (
            words.dtype == np.uint32
            and words.ndim == 1
            and widths.shape == (n,)
            and widths.dtype == np.uint8
            and maxima.shape == (n,)
            and maxima.dtype == np.uint32
            and (n == 0 or int(widths.max()) <= 32)
        )
        offsets = np.zeros(n + 1, np.int64)
        if ok and n:
            sizes = _block_sizes(indptr, term_blocks)
            np.cumsum((sizes * widths.astype(np.int64) + 31) // 32, out=offsets[1:])
        if not (ok and len(words) == int(offsets[-1]) + 1):
            raise InputError(
                "stored impacts do not match the postings; rebuild the index", path / CODE_FILES[0]
            )
        return cls(words, offsets, widths, maxima)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.words, self.offsets, self.widths, self.maxima))


def _block_sizes(indptr: np.ndarray, term_blocks: np.ndarray) -> np.ndarray:
    """Postings in each block."""
    df = np.diff(np.asarray(indptr))
    nblocks = np.diff(term_blocks)
    sizes = np.full(int(term_blocks[-1]), BLOCK, dtype=np.int64)
    has = nblocks > 0
    sizes[term_blocks[1:][has] - 1] = df[has] - BLOCK * (nblocks[has] - 1)
    return sizes


# ---- bit packing --------------------------------------------------------------------------------


@njit(nogil=True, cache=True, inline="always")
def _width(largest):
    """Bits to hold values 0..largest."""
    bits = 0
    while bits < 32 and (np.uint64(largest) >> np.uint64(bits)) != 0:
        bits += 1
    return bits


@njit(nogil=True, cache=True, inline="always")
def _pack(values, n, bits, out, o):
    """Write values[:n] (each < 2**bits) into out[o:], bits each; returns the next word."""
    if bits == 0:
        return o
    acc = np.uint64(0)
    filled = np.uint64(0)
    b = np.uint64(bits)
    for i in range(n):
        acc |= np.uint64(values[i]) << filled
        filled += b
        if filled >= 32:
            out[o] = np.uint32(acc & np.uint64(0xFFFFFFFF))
            o += 1
            acc >>= np.uint64(32)
            filled -= np.uint64(32)
    if filled > 0:
        out[o] = np.uint32(acc)
        o += 1
    return o


@njit(nogil=True, cache=True, inline="always")
def _unpack(words, o, n, bits, out):
    """Read n values of `bits` bits from words[o:] into out[:n]. Each value is cut from the 64 bits of
    its word and the next (every stream ends with a spare word), independently of the others, so the
    loop has no branch and no carried state."""
    if bits == 0:
        for i in range(n):
            out[i] = 0
        return
    b = np.uint64(bits)
    mask = (np.uint64(1) << b) - np.uint64(1)
    base = np.uint64(o)
    for i in range(n):
        at = np.uint64(i) * b
        w = base + (at >> np.uint64(5))
        pair = np.uint64(words[w]) | (np.uint64(words[w + np.uint64(1)]) << np.uint64(32))
        out[i] = np.int64((pair >> (at & np.uint64(31))) & mask)


@njit(nogil=True, cache=True, inline="always")
def _unpack_aligned(words, o, n, bits, out):
    """_unpack, reading 8-, 16- and 32-bit values straight from the words (a loop the compiler
    vectorises): docno gaps and impact codes are packed in those widths, being what every query
    decodes."""
    if bits == 8:
        view8 = words.view(np.uint8)
        at = np.uint64(o) * np.uint64(4)
        for i in range(n):
            out[i] = view8[at + np.uint64(i)]
    elif bits == 16:
        view16 = words.view(np.uint16)
        at = np.uint64(o) * np.uint64(2)
        for i in range(n):
            out[i] = view16[at + np.uint64(i)]
    elif bits == 32:
        at = np.uint64(o)
        for i in range(n):
            out[i] = words[at + np.uint64(i)]
    else:
        _unpack(words, o, n, bits, out)


@njit(nogil=True, cache=True, inline="always")
def decode_docs(words, offsets, widths, lasts, block, first, n, out):
    """The docnos of `block` (n postings; `first`: its term's first block) into out[:n]."""
    _unpack_aligned(words, offsets[block], n, widths[block, 0], out)
    previous = np.int64(lasts[block - 1]) if block > first else np.int64(-1)
    for i in range(n):
        previous += out[i] + 1
        out[i] = previous


@njit(nogil=True, cache=True, inline="always")
def decode_tfs(words, offsets, widths, block, n, out):
    """The term frequencies of `block` (n postings) into out[:n]."""
    o = offsets[block] + (n * np.int64(widths[block, 0]) + 31) // 32
    _unpack(words, o, n, widths[block, 1], out)
    for i in range(n):
        out[i] += 1


@njit(nogil=True, cache=True, inline="always")
def decode_codes(words, offsets, widths, block, n, out):
    _unpack_aligned(words, offsets[block], n, widths[block], out)


@njit(nogil=True, cache=True)
def _measure(indptr, docnos, tfs, lo, hi, widths, lasts, sizes, b0):
    """Widths, last docno and word count of each block of terms [lo, hi) (docnos/tfs start at
    indptr[lo]); blocks numbered from b0. Returns -1, or the first term whose docnos do not rise."""
    base = indptr[lo]
    b = b0
    for t in range(lo, hi):
        s, e = indptr[t] - base, indptr[t + 1] - base
        previous = np.int64(-1)
        for a in range(s, e, BLOCK):
            z = min(a + BLOCK, e)
            gap_max = np.int64(0)
            tf_max = np.int64(0)
            for p in range(a, z):
                gap = np.int64(docnos[p]) - previous - 1
                if gap < 0 or tfs[p] < 1:
                    return t
                gap_max = max(gap_max, gap)
                tf_max = max(tf_max, np.int64(tfs[p]) - 1)
                previous = docnos[p]
            wd, wf = _width(gap_max), _width(tf_max)
            widths[b, 0] = wd
            widths[b, 1] = wf
            lasts[b] = previous
            sizes[b] = (np.int64(z - a) * wd + 31) // 32 + (np.int64(z - a) * wf + 31) // 32
            b += 1
    return -1


@njit(nogil=True, cache=True)
def _write(indptr, docnos, tfs, lo, hi, widths, offsets, out, b0):
    base = indptr[lo]
    b = b0
    values = np.empty(BLOCK, np.int64)
    for t in range(lo, hi):
        s, e = indptr[t] - base, indptr[t + 1] - base
        previous = np.int64(-1)
        for a in range(s, e, BLOCK):
            z = min(a + BLOCK, e)
            for p in range(a, z):
                values[p - a] = np.int64(docnos[p]) - previous - 1
                previous = docnos[p]
            o = _pack(values, z - a, widths[b, 0], out, offsets[b])
            for p in range(a, z):
                values[p - a] = np.int64(tfs[p]) - 1
            _pack(values, z - a, widths[b, 1], out, o)
            b += 1


def pack_postings(
    indptr: np.ndarray, docnos: np.ndarray, tfs: np.ndarray, ranges: list[tuple[int, int]] | None = None
) -> Blocks:
    """The blocks of CSR postings (docnos ascending within each term, tfs >= 1), term range by term
    range (`ranges`, default all at once) so that memory-mapped inputs stay bounded."""
    indptr = np.asarray(indptr, dtype=np.int64)
    term_blocks = blocks_of(indptr)
    n = int(term_blocks[-1])
    terms = len(indptr) - 1
    ranges = ranges if ranges is not None else ([(0, terms)] if terms else [])
    widths = np.zeros((n, 2), np.uint8)
    lasts = np.zeros(n, np.int32)
    sizes = np.zeros(n, np.int64)
    for lo, hi in ranges:
        a, b = int(indptr[lo]), int(indptr[hi])
        bad = _measure(
            indptr,
            np.asarray(docnos[a:b]),
            np.asarray(tfs[a:b]),
            lo,
            hi,
            widths,
            lasts,
            sizes,
            int(term_blocks[lo]),
        )
        if bad >= 0:
            raise ValueError(f"postings of term {bad} are not in rising docno order with tf >= 1")
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    words = np.zeros(int(offsets[-1]) + 1, np.uint32)  # + the spare word _unpack reads past the end
    for lo, hi in ranges:
        a, b = int(indptr[lo]), int(indptr[hi])
        _write(
            indptr,
            np.asarray(docnos[a:b]),
            np.asarray(tfs[a:b]),
            lo,
            hi,
            widths,
            offsets,
            words,
            int(term_blocks[lo]),
        )
    return Blocks(indptr, term_blocks, words, lasts, offsets, widths)


@njit(nogil=True, cache=True)
def _measure_codes(indptr, codes, lo, hi, widths, maxima, sizes, b0):
    base = indptr[lo]
    b = b0
    for t in range(lo, hi):
        s, e = indptr[t] - base, indptr[t + 1] - base
        for a in range(s, e, BLOCK):
            z = min(a + BLOCK, e)
            top = np.int64(0)
            for p in range(a, z):
                top = max(top, np.int64(codes[p]))
            maxima[b] = top
            widths[b] = _width(top)
            sizes[b] = (np.int64(z - a) * widths[b] + 31) // 32
            b += 1


@njit(nogil=True, cache=True)
def _write_codes(indptr, codes, lo, hi, widths, offsets, out, b0):
    base = indptr[lo]
    b = b0
    values = np.empty(BLOCK, np.int64)
    for t in range(lo, hi):
        s, e = indptr[t] - base, indptr[t + 1] - base
        for a in range(s, e, BLOCK):
            z = min(a + BLOCK, e)
            for p in range(a, z):
                values[p - a] = codes[p]
            _pack(values, z - a, widths[b], out, offsets[b])
            b += 1


def pack_codes(
    indptr: np.ndarray, codes: np.ndarray, ranges: list[tuple[int, int]] | None = None
) -> CodeBlocks:
    """The impact codes (one per posting, CSR order) in blocks aligned with the postings'."""
    indptr = np.asarray(indptr, dtype=np.int64)
    term_blocks = blocks_of(indptr)
    n = int(term_blocks[-1])
    terms = len(indptr) - 1
    ranges = ranges if ranges is not None else ([(0, terms)] if terms else [])
    widths = np.zeros(n, np.uint8)
    maxima = np.zeros(n, np.uint32)
    sizes = np.zeros(n, np.int64)
    for lo, hi in ranges:
        a, b = int(indptr[lo]), int(indptr[hi])
        _measure_codes(indptr, np.asarray(codes[a:b]), lo, hi, widths, maxima, sizes, int(term_blocks[lo]))
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    words = np.zeros(int(offsets[-1]) + 1, np.uint32)  # + the spare word _unpack reads past the end
    for lo, hi in ranges:
        a, b = int(indptr[lo]), int(indptr[hi])
        _write_codes(indptr, np.asarray(codes[a:b]), lo, hi, widths, offsets, words, int(term_blocks[lo]))
    return CodeBlocks(words, offsets, widths, maxima)


# ---- decoding whole arrays ---------------------------------------------------------------------


@njit(nogil=True, cache=True)
def _unpack_all(indptr, term_blocks, words, offsets, widths, lasts, docnos, tfs, lo, hi, with_tfs):
    """The postings of terms [lo, hi) into docnos/tfs (CSR order, from indptr[lo]); returns -1, or a
    block whose last docno is not `lasts`'."""
    buf = np.empty(BLOCK, np.int64)
    for t in range(lo, hi):
        first = term_blocks[t]
        p = indptr[t] - indptr[lo]
        end = indptr[t + 1] - indptr[lo]
        for blk in range(first, term_blocks[t + 1]):
            n = min(BLOCK, end - p)
            decode_docs(words, offsets, widths, lasts, blk, first, n, buf)
            if buf[n - 1] != lasts[blk]:
                return blk
            for i in range(n):
                docnos[p + i] = buf[i]
            if with_tfs:
                decode_tfs(words, offsets, widths, blk, n, buf)
                for i in range(n):
                    tfs[p + i] = buf[i]
            p += n
    return -1


def unpack_postings(
    blocks: Blocks, path: Path | None = None, lo: int = 0, hi: int | None = None, with_tfs: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(docnos int32, tfs int32) of the postings of terms [lo, hi) (default: all), in CSR order (of
    verified blocks: see verify_postings); without `with_tfs`, tfs is empty."""
    hi = len(blocks.indptr) - 1 if hi is None else hi
    total = int(blocks.indptr[hi] - blocks.indptr[lo])
    docnos = np.empty(total, np.int32)
    tfs = np.empty(total if with_tfs else 0, np.int32)
    bad = _unpack_all(
        blocks.indptr,
        blocks.term_blocks,
        blocks.words,
        blocks.offsets,
        blocks.widths,
        blocks.lasts,
        docnos,
        tfs,
        lo,
        hi,
        with_tfs,
    )
    if bad >= 0:  # (an opened index was verified: every block fits; this guards other callers)
        raise InputError(
            "inconsistent index array: a block's documents do not match its last docno; rebuild the index",
            path,
        )
    return docnos, tfs


@njit(nogil=True, cache=True)
def _unpack_codes_all(indptr, term_blocks, words, offsets, widths, out):
    buf = np.empty(BLOCK, np.int64)
    for t in range(len(indptr) - 1):
        p = indptr[t]
        for blk in range(term_blocks[t], term_blocks[t + 1]):
            n = min(BLOCK, indptr[t + 1] - p)
            decode_codes(words, offsets, widths, blk, n, buf)
            for i in range(n):
                out[p + i] = buf[i]
            p += n


def unpack_codes(indptr: np.ndarray, code_blocks: CodeBlocks) -> np.ndarray:
    """Every posting's impact code, in CSR order: uint16 when every block's codes fit in 16 bits (2
    bytes a posting fewer for the flat kernels to read and hold), else uint32."""
    narrow = len(code_blocks.widths) == 0 or int(code_blocks.widths.max()) <= 16
    out = np.empty(int(indptr[-1]), np.uint16 if narrow else np.uint32)
    _unpack_codes_all(
        np.asarray(indptr, np.int64),
        blocks_of(indptr),
        code_blocks.words,
        code_blocks.offsets,
        code_blocks.widths,
        out,
    )
    return out


@njit(nogil=True, cache=True)
def _verify(indptr, term_blocks, words, offsets, widths, lasts, num_docs, sums):
    """One pass over every block: its last docno is `lasts`' and below num_docs, and each posting's
    frequency is added to its document's sum. Returns -1, or the first block that breaks a rule."""
    docs = np.empty(BLOCK, np.int64)
    tfs = np.empty(BLOCK, np.int64)
    for t in range(len(indptr) - 1):
        first = term_blocks[t]
        p = indptr[t]
        for blk in range(first, term_blocks[t + 1]):
            n = min(BLOCK, indptr[t + 1] - p)
            decode_docs(words, offsets, widths, lasts, blk, first, n, docs)
            if docs[n - 1] != lasts[blk] or docs[n - 1] >= num_docs:
                return blk
            decode_tfs(words, offsets, widths, blk, n, tfs)
            for i in range(n):
                sums[docs[i]] += tfs[i]
            p += n
    return -1


def verify_postings(blocks: Blocks, doc_lengths: np.ndarray, path: Path) -> None:
    """InputError naming `path` unless every block decodes to rising docnos below the document count
    whose frequencies sum, document by document, to `doc_lengths` (one pass, no postings kept)."""
    sums = np.zeros(len(doc_lengths), np.int64)
    bad = _verify(
        blocks.indptr,
        blocks.term_blocks,
        blocks.words,
        blocks.offsets,
        blocks.widths,
        blocks.lasts,
        len(doc_lengths),
        sums,
    )
    if bad >= 0:
        raise InputError(
            "inconsistent index array: expected each block's documents below the document"
            " count, ending at its recorded last one; rebuild the index",
            path / POSTING_FILES[1],
        )
    if not np.array_equal(sums, np.asarray(doc_lengths, dtype=np.int64)):
        raise InputError(
            "inconsistent index array: expected each document's length to be the sum of"
            " its term frequencies; rebuild the index",
            path / "doc_lengths.npy",
        )


@njit(nogil=True, cache=True)
def _verify_codes(indptr, term_blocks, words, offsets, widths, maxima, sizes):
    """Each block's codes have the recorded maximum, below its term's run length; -1 or a bad block."""
    codes = np.empty(BLOCK, np.int64)
    for t in range(len(indptr) - 1):
        p = indptr[t]
        for blk in range(term_blocks[t], term_blocks[t + 1]):
            n = min(BLOCK, indptr[t + 1] - p)
            decode_codes(words, offsets, widths, blk, n, codes)
            top = np.int64(0)
            for i in range(n):
                top = max(top, codes[i])
            if top != maxima[blk] or top >= sizes[t]:
                return blk
            p += n
    return -1


def verify_codes(indptr: np.ndarray, code_blocks: CodeBlocks, bases: np.ndarray, path: Path) -> None:
    """InputError naming `path` unless every code points into its term's run of the table and each
    block's recorded maximum is its largest code (the bound pruning trusts)."""
    indptr = np.asarray(indptr, np.int64)
    bad = _verify_codes(
        indptr,
        blocks_of(indptr),
        code_blocks.words,
        code_blocks.offsets,
        code_blocks.widths,
        code_blocks.maxima,
        np.diff(np.asarray(bases)),
    )
    if bad >= 0:
        raise InputError("stored impacts do not match the postings; rebuild the index", path / CODE_FILES[0])


@njit(nogil=True, cache=True)
def _term_codes(indptr, term_blocks, words, offsets, widths, t, out):
    p = 0
    buf = np.empty(BLOCK, np.int64)
    df = indptr[t + 1] - indptr[t]
    for blk in range(term_blocks[t], term_blocks[t + 1]):
        n = min(BLOCK, df - p)
        decode_codes(words, offsets, widths, blk, n, buf)
        for i in range(n):
            out[p + i] = buf[i]
        p += n


def term_codes(indptr: np.ndarray, term_blocks: np.ndarray, code_blocks: CodeBlocks, t: int) -> np.ndarray:
    """The impact codes of term t's postings (int64)."""
    out = np.empty(int(indptr[t + 1] - indptr[t]), np.int64)
    _term_codes(indptr, term_blocks, code_blocks.words, code_blocks.offsets, code_blocks.widths, t, out)
    return out
