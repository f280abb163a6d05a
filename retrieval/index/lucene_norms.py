"""Lucene's one-byte document-length norm (SmallFloat.intToByte4 / byte4ToInt).

Lucene stores each document's length in one byte, so its BM25 and language
models see a quantised length (e.g. 122 -> 120). Reproducing that is worth
about +0.0005 MAP of parity with Anserini on CACM.
"""

from __future__ import annotations

import numpy as np


def _long_to_int4(i: int) -> int:
    num_bits = i.bit_length()
    if num_bits < 4:
        return i  # subnormal
    shift = num_bits - 4
    return ((i >> shift) & 0x07) | ((shift + 1) << 3)


def _int4_to_long(i: int) -> int:
    bits, shift = i & 0x07, (i >> 3) - 1
    return bits if shift == -1 else (bits | 0x08) << shift


_MAX_INT4 = _long_to_int4(2**31 - 1)
_NUM_FREE_VALUES = 255 - _MAX_INT4


def int_to_byte4(i: int) -> int:
    """Encode a length into Lucene's norm byte (as an unsigned int 0..255)."""
    if i < _NUM_FREE_VALUES:
        return i
    return _NUM_FREE_VALUES + _long_to_int4(i - _NUM_FREE_VALUES)


def byte4_to_int(b: int) -> int:
    """Decode a norm byte back to the length Lucene's similarities see."""
    if b < _NUM_FREE_VALUES:
        return b
    return _NUM_FREE_VALUES + _int4_to_long(b - _NUM_FREE_VALUES)


LENGTH_TABLE = np.array([byte4_to_int(b) for b in range(256)], dtype=np.float64)


def norm_codes(lengths: np.ndarray) -> np.ndarray:
    """`int_to_byte4` of every length at once (integers 0 .. 2**31 - 1), in time and memory
    proportional to the number of lengths, whatever their size."""
    n = np.asarray(lengths, dtype=np.int64)
    rest = np.maximum(n - _NUM_FREE_VALUES, 0)
    bits = np.frexp(rest.astype(np.float64))[1].astype(np.int64)  # bit_length, exact below 2**53
    shift = np.maximum(bits - 4, 0)
    int4 = np.where(bits < 4, rest, ((rest >> shift) & 0x07) | ((shift + 1) << 3))
    return np.where(n < _NUM_FREE_VALUES, n, _NUM_FREE_VALUES + int4)


def quantised_lengths(lengths: np.ndarray) -> np.ndarray:
    """Document lengths as Lucene's norms decode them."""
    return LENGTH_TABLE[norm_codes(lengths)]
