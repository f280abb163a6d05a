"""A scratch cache of frozen encoder outputs (token states), so training and
experiments encode each text once.

Each entry is a directory named by a hash of the encoder settings and the
texts: `states.npy` (all tokens, hidden) fp16, `offsets.npy` (n + 1,) int64.
Entries are written atomically; nothing here belongs in the repository.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from retrieval import storage
from retrieval.late.encoder import TokenEncoder
from retrieval.runtime import precision as precisions
from retrieval.runtime.local_models import cache_root


def default_cache_dir() -> Path:
    """$RETRIEVAL_CACHE/late, else ~/.cache/retrieval/late."""
    return cache_root() / "late"


class Packed:
    """Variable-length token matrices packed as one array plus offsets."""

    def __init__(self, states: np.ndarray, offsets: np.ndarray):
        self.states, self.offsets = states, offsets

    @classmethod
    def pack(cls, arrays: Sequence[np.ndarray], dtype=np.float16) -> Packed:
        lengths = np.array([len(a) for a in arrays], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        dim = arrays[0].shape[1] if arrays else 0
        states = np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros((0, dim), dtype)
        return cls(states, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.states[self.offsets[i]:self.offsets[i + 1]]


def cached_states(encoder: TokenEncoder, texts: Sequence[str], is_query: bool,
                  cache_dir: str | Path | None = None, desc: str = "encoding") -> Packed:
    """Token states of `texts` from the cache, encoding (and storing) them on a miss."""
    settings = {k: v for k, v in encoder.settings().items()
                if k not in (("doc_length",) if is_query else ("query_length", "augment"))}
    arithmetic = [precisions.ARITHMETIC_VERSION, precisions.cache_signature(encoder.precision)]
    key = json.dumps([settings, arithmetic, is_query, list(texts)])
    key = hashlib.sha256(key.encode()).hexdigest()
    path = Path(cache_dir or default_cache_dir()) / key[:24]
    if not (path / "offsets.npy").is_file():
        packed = Packed.pack(encoder.encode(texts, is_query, desc=desc))
        with storage.atomic_directory(path) as tmp:
            storage.save_array(tmp / "states.npy", packed.states)
            storage.save_array(tmp / "offsets.npy", packed.offsets)
    return Packed(storage.load_array(path / "states.npy", mmap=False),
                  storage.load_array(path / "offsets.npy", mmap=False))
