"""The dense part of an index: document embeddings in a FAISS index under `dense/`.

Layout of `<index>/dense/`: `faiss.index` (FAISS's own writer), `doc_ids.npy`
(FAISS row i is doc_ids[i], the index's internal order). The manifest entry
`parts.dense` records the model (name, SHA-256 of its weights), dimension,
pooling, index type and its parameters (never the precision: that is the
searching machine's).

Index types: `flat` (exact inner product, the default), `hnsw` (graph;
`m`, `ef_construction`, search-time `ef_search`) and `ivfpq` (inverted lists
with product quantisation; `nlist`, `m`, `nbits`, search-time `nprobe`).
Embeddings are L2-normalised, so inner product is cosine similarity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from retrieval import storage
from retrieval.dense.encoder import Encoder
from retrieval.errors import InputError

PART = "dense"
INDEX_FILE = "faiss.index"
DOC_IDS_FILE = "doc_ids.npy"
INDEX_TYPES = ("flat", "hnsw", "ivfpq")
DEFAULTS: dict[str, dict[str, int]] = {
    "flat": {},
    "hnsw": {"m": 32, "ef_construction": 200, "ef_search": 128},
    "ivfpq": {"nlist": 0, "m": 48, "nbits": 8, "nprobe": 16},  # nlist 0 = chosen from size
}


def index_params(index_type: str, params: dict[str, int] | None = None) -> dict[str, int]:
    """The full parameter set of an index type, defaults filled in, unknown keys refused."""
    if index_type not in INDEX_TYPES:
        raise InputError(f"unknown dense index type {index_type!r}; expected one of "
                         + ", ".join(INDEX_TYPES))
    params = dict(params or {})
    unknown = sorted(set(params) - set(DEFAULTS[index_type]))
    if unknown:
        raise InputError(f"unknown parameter(s) {', '.join(unknown)} for a {index_type} index;"
                         f" expected {', '.join(DEFAULTS[index_type]) or 'none'}")
    values = {**DEFAULTS[index_type], **{k: int(v) for k, v in params.items()}}
    for key, value in values.items():
        low = 0 if key == "nlist" else 1  # nlist 0: chosen from the collection's size
        if value < low or (key == "nbits" and value > 16):
            raise InputError(f"{index_type} {key}={value} is out of range; expected "
                             + ("1 to 16" if key == "nbits" else f"a whole number >= {low}"))
    return values


def build_faiss(vectors: np.ndarray, index_type: str = "flat",
                params: dict[str, int] | None = None) -> tuple[faiss.Index, dict[str, int]]:
    """A FAISS inner-product index over `vectors` (n, dim) and the parameters used."""
    p = index_params(index_type, params)
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    n, dim = x.shape
    if index_type == "flat":
        index = faiss.IndexFlatIP(dim)
    elif index_type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, p["m"], faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = p["ef_construction"]
    else:
        if dim % p["m"]:
            raise InputError(f"ivfpq m={p['m']} must divide the embedding dimension {dim}")
        if p["nlist"] <= 0:
            p["nlist"] = max(1, min(int(4 * math.sqrt(n)), n // 39))
        if n < max(p["nlist"], 2 ** p["nbits"]):
            raise InputError(f"too few documents ({n}) to train an ivfpq index with nlist="
                             f"{p['nlist']}, nbits={p['nbits']}; use flat or smaller values")
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFPQ(quantizer, dim, p["nlist"], p["m"], p["nbits"],
                                 faiss.METRIC_INNER_PRODUCT)
        index.train(x)
    index.add(x)
    configure_search(index, p)
    return index, p


def check_search_params(index_type: str, params: dict[str, int]) -> None:
    """Refuse a search-time parameter this type of index does not have (ef_search: hnsw, nprobe:
    ivfpq), rather than ignore it."""
    for key in params:
        if key not in DEFAULTS.get(index_type, {}):
            owner = next(t for t, names in DEFAULTS.items() if key in names)
            raise InputError(f"{key} applies only to an {owner} dense part; this index's is {index_type}")


def configure_search(index: faiss.Index, params: dict[str, int]) -> None:
    """Apply search-time parameters (HNSW ef_search, IVF nprobe) to a loaded index."""
    if isinstance(index, faiss.IndexHNSW) and "ef_search" in params:
        index.hnsw.efSearch = int(params["ef_search"])
    if isinstance(index, faiss.IndexIVF) and "nprobe" in params:
        index.nprobe = int(params["nprobe"])


def build_dense_part(index_dir: Path, doc_ids: Sequence[str], texts: Sequence[str], *,
                     encoder: Encoder | None = None, index_type: str = "flat",
                     params: dict[str, int] | None = None) -> dict[str, Any]:
    """Encode `texts` (doc_ids[i]'s contents), write `index_dir/dense/`, record it; the entry.
    Written in place: `add_dense` is the one that replaces an existing part with the whole index."""
    if len(doc_ids) != len(texts):
        raise ValueError(f"{len(doc_ids)} doc ids but {len(texts)} texts")
    index_params(index_type, params)  # refuse bad parameters before the slow encoding
    storage.read_manifest(index_dir)
    encoder = encoder or Encoder()
    vectors = encoder.encode(texts, desc="encoding documents")
    return write_dense_part(index_dir, doc_ids, vectors, encoder.describe(), index_type, params)


def write_dense_part(index_dir: Path, doc_ids: Sequence[str], vectors: np.ndarray,
                     model: dict[str, Any], index_type: str = "flat",
                     params: dict[str, int] | None = None) -> dict[str, Any]:
    """Write `index_dir/dense/` from already encoded vectors (row i is doc_ids[i]); the entry.

    `model` is the encoder's description (`Encoder.describe()`), recorded in the manifest.
    """
    index, used = build_faiss(vectors, index_type, params)
    target = Path(index_dir) / PART
    with storage.atomic_directory(target) as tmp:
        with storage.naming(tmp / INDEX_FILE):
            faiss.write_index(index, str(tmp / INDEX_FILE))
        storage.save_array(tmp / DOC_IDS_FILE, np.asarray([str(d) for d in doc_ids], dtype=str))
    entry = dict(model, index_type=index_type, params=used, count=len(doc_ids))
    storage.add_part(index_dir, PART, entry, target)
    return entry


def dense_entry(index_dir: Path) -> dict[str, Any]:
    """The manifest entry of the dense part, or InputError when there is none."""
    manifest = storage.read_manifest(index_dir)
    entry = manifest.get("parts", {}).get(PART)
    if entry is None:
        raise InputError("index has no dense part; build it with `retrieval index --dense`",
                         index_dir)
    return entry


def load_dense_part(index_dir: Path, verify: bool = True
                    ) -> tuple[faiss.Index, np.ndarray, dict[str, Any]]:
    """(FAISS index, doc ids by row, manifest entry) of an index's dense part."""
    entry = dense_entry(index_dir)
    if verify:
        storage.verify_files(index_dir, entry.get("files", {}))
    root = Path(index_dir) / PART
    try:
        index = faiss.read_index(str(root / INDEX_FILE))
    except RuntimeError as e:
        raise InputError(f"cannot read FAISS index ({str(e).splitlines()[0]}); rebuild the index",
                         root / INDEX_FILE) from None
    doc_ids = storage.load_array(root / DOC_IDS_FILE, mmap=False)
    if entry.get("dim") is not None and index.d != entry["dim"]:
        raise InputError(f"FAISS index has {index.d} dimensions, the manifest says {entry['dim']};"
                         " rebuild the index", root / INDEX_FILE)
    if index.ntotal != len(doc_ids):
        raise InputError(f"FAISS index has {index.ntotal} vectors for {len(doc_ids)} doc ids;"
                         " rebuild the index", root)
    configure_search(index, entry.get("params", {}))
    return index, doc_ids, entry


def add_dense(index: Any, encoder: Encoder | None = None, index_type: str = "flat",
              params: dict[str, int] | None = None, in_place: bool = False) -> dict[str, Any]:
    """Add (or replace) the dense part of an existing index (an Index or its path).

    Documents are read from the index's doc store in internal order, so FAISS
    row i is docno i; `Document.contents` (title + " " + text) is encoded. A part
    being replaced is replaced with the whole index (index.changing_part), unless
    `in_place`: for callers already writing into a copy that replaces the index.
    """
    from retrieval.index.native import changing_part

    with changing_part(index, PART, in_place) as target:
        docs = list(target.docstore)
        return build_dense_part(target.path, [d.id for d in docs], [d.contents for d in docs],
                                encoder=encoder, index_type=index_type, params=params)
